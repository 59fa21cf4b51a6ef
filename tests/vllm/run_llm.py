"""One vLLM engine run (offline LLM()), printed as one JSON line: greedy tokens + logprobs.

    run_llm.py MODEL_DIR [--load-format F] [--quantization Q] [--hf-overrides JSON]
                         [--extra JSON] [--mp] [--reload WEIGHTS_DIR]

--mp keeps vLLM's default multiprocessing (engine core and worker in spawned processes, which
then find ctstream only through its vllm.general_plugins entry point); without it the engine runs
in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, faster). --reload: vLLM's in-place
reload_weights(weights_path=WEIGHTS_DIR) after the engine starts, before generating. A failure
prints {"error": "..."}.
"""
import argparse
import json
import os
import sys
import time

PROMPTS = [[1, 5, 17, 42, 99, 7], [1, 200, 3], [1, 311, 12, 400, 9, 77, 250]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--load-format", default="auto")
    ap.add_argument("--quantization", default=None)
    ap.add_argument("--hf-overrides", default=None)
    ap.add_argument("--extra", default=None)
    ap.add_argument("--mp", action="store_true")
    ap.add_argument("--prompts", default=None, help="JSON list of token-id lists (default PROMPTS)")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallel size (implies --mp)")
    ap.add_argument("--reload", default=None, help="reload_weights(weights_path=...) before generating")
    a = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if a.tp > 1:  # one CPU worker per core (vLLM's auto binding wants one NUMA node per worker)
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i % os.cpu_count()) for i in range(a.tp)))
    elif not a.mp:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    kw = dict(model=a.model, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=128,
              load_format=a.load_format, seed=0, tensor_parallel_size=a.tp)
    if a.quantization:
        kw["quantization"] = a.quantization
    if a.hf_overrides:
        kw["hf_overrides"] = json.loads(a.hf_overrides)
    if a.extra:
        kw["model_loader_extra_config"] = json.loads(a.extra)
    t0 = time.perf_counter()
    try:
        llm = LLM(**kw)
        init = time.perf_counter() - t0
        if a.reload:
            llm.collective_rpc("reload_weights", kwargs={"weights_path": a.reload})
        # logprobs=2: the top two at each step, which tells a near tie (tests/vllm/test_vllm.py same_greedy_tokens)
        sp = SamplingParams(temperature=0, max_tokens=8, logprobs=2, detokenize=False)
        prompts = json.loads(a.prompts) if a.prompts else PROMPTS
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.stdout.flush()
        os._exit(0)
    res = []
    for o in outs:
        c = o.outputs[0]
        lps = [{str(k): v.logprob for k, v in d.items()} for d in c.logprobs]
        res.append({"tokens": list(c.token_ids), "logprobs": lps})
    print(json.dumps({"outputs": res, "init_s": init}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip vLLM's slow shutdown


if __name__ == "__main__":
    main()
