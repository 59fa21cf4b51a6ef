// libFuzzer target: ~/.aws/config and ~/.aws/credentials texts (src/io/aws_config.hpp) -> sections
// and the resolved S3 configuration. Input: the first line names a profile (AWS_PROFILE when not
// empty); the rest is used as the config file and as the credentials file. Invariants: nothing
// but ctstream::Error is thrown; bounded (the parser refuses over-cap texts); a resolved
// configuration has a valid region, an endpoint host, and credentials exactly when not anonymous.
#include <cstdint>
#include <string>
#include <string_view>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"

using namespace ctstream::io;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string profile(input.substr(0, nl == std::string_view::npos ? 0 : nl));
  const std::string text(nl == std::string_view::npos ? input : input.substr(nl + 1));
  try {
    const IniFile f = parse_aws_ini(text, "config");
    size_t entries = 0;
    for (const auto& [name, sec] : f) {
      if (name.empty()) __builtin_trap();
      entries += sec.values.size();
      for (const auto& [k, v] : sec.values)
        if (k.empty()) __builtin_trap();
    }
    if (entries > text.size()) __builtin_trap();
  } catch (const ctstream::Error&) {
  }
  for (int variant = 0; variant < 3; ++variant) {
    EnvMap env;
    if (!profile.empty()) env["AWS_PROFILE"] = profile;
    if (variant == 1) env["AWS_ENDPOINT_URL"] = profile;
    if (variant == 2) env["AWS_REGION"] = profile;
    AwsFiles files;
    files.config = text;
    files.credentials = variant == 0 ? text : std::string();
    try {
      const S3Config c = resolve_s3_config(env, files);
      if (c.region.empty() || c.endpoint.host.empty()) __builtin_trap();
      for (char ch : c.region)
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) __builtin_trap();
      if (c.anonymous != c.credentials.access_key_id.empty()) __builtin_trap();
      if (!c.anonymous && c.credentials.secret_access_key.empty()) __builtin_trap();
    } catch (const ctstream::Error&) {
    }
  }
  return 0;
}
