"""Engine runs forked from one process that has imported vLLM: what an engine run spends before
LLM() (Python importing torch and vLLM, 5-10 s of each ~15 s run on these tiny models) is paid
once per pytest worker instead of once per run.

    zygote.py            reads one JSON request per line on stdin:
                           {"argv": [...run_llm.py arguments], "env": {NAME: value or null},
                            "log": PATH}
                         forks; the child starts a session of its own (the caller kills its process
                         group), sends its stdout and stderr to PATH, applies `env` (null: unset),
                         and runs run_llm.main(); the zygote writes the child's pid as one line,
                         waits for it, then writes "done STATUS".

Forking after `import vllm` is what vLLM itself does for its workers where it may (multiprocessing's
fork method, its default where no CUDA context exists; its CPU platform spawns instead, below).
Nothing of vLLM runs in the zygote before the
fork: no engine, no torch operation, no thread pool (vLLM reads its environment variables lazily,
vllm/envs.py __getattr__, so each child's `env` and run_llm's own settings apply). The engine core
and the TP workers of --mp and --tp runs are fresh interpreters either way: vLLM's CPU platform
starts them with multiprocessing's spawn (vllm/platforms/cpu.py), so they find ctstream only
through its entry point, as in a user's process.
"""
import json
import os
import sys


def main():
    # The answers go to a copy of stdout; fd 1 becomes stderr, so nothing an import prints (vLLM's
    # logger writes to stdout) lands in the caller's pipe.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_llm
    from vllm import LLM, SamplingParams  # noqa: F401 - the import this process exists to pay once

    null = os.open(os.devnull, os.O_RDONLY)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.dup2(null, 0)
                os.close(fd)
                os.close(null)
                out.close()  # the answer pipe: held only by the zygote
                for k, v in req.get("env", {}).items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                sys.argv = ["run_llm.py", *req["argv"]]
                run_llm.main()
            except BaseException:  # noqa: BLE001 - a child never returns into the zygote's loop
                import traceback

                traceback.print_exc()
            finally:
                os._exit(1)
        out.write(f"{pid}\n")
        _, status = os.waitpid(pid, 0)
        out.write(f"done {status}\n")


if __name__ == "__main__":
    main()
