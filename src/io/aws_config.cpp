#include "io/aws_config.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include "core/text.hpp"
#include "ctstream/error.hpp"
#include "io/file.hpp"

extern char** environ;

namespace ctstream::io {

namespace {

constexpr std::string_view blanks = " \t\r\f\v";

std::string_view trim(std::string_view s) noexcept { return detail::trim(s, blanks); }

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = detail::ascii_lower(c);
  return r;
}

[[noreturn]] void bad_file(std::string_view file, size_t line, const std::string& why) {
  throw Error(ErrorKind::invalid_config, std::string(file), "",
              line ? "line " + std::to_string(line) + ": " + why : why);
}

// Splits "key = value" / "key: value" at the first delimiter (ConfigParser's default `=` and `:`).
bool split_option(std::string_view line, std::string& key, std::string& value) {
  const size_t d = line.find_first_of("=:");
  if (d == std::string_view::npos) return false;
  key = lower(trim(line.substr(0, d)));
  value = std::string(trim(line.substr(d + 1)));
  return !key.empty();
}

// An environment value; empty counts as unset (the SDKs ignore empty variables).
const std::string* env_get(const EnvMap& env, std::string_view name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

bool truthy(std::string_view value, std::string_view what) {
  const std::string v = lower(trim(value));
  if (v.empty() || v == "0" || v == "false" || v == "no") return false;
  if (v == "1" || v == "true" || v == "yes") return true;
  throw Error(ErrorKind::invalid_config, std::string(what), "", "expected true or false, got '" + v + "'");
}

const IniSection* section(const IniFile& f, std::string_view name) {
  const auto it = f.find(name);
  return it == f.end() ? nullptr : &it->second;
}

const std::string* value_of(const IniSection* s, std::string_view key) {
  if (!s) return nullptr;
  const auto it = s->values.find(key);
  return it == s->values.end() || it->second.empty() ? nullptr : &it->second;
}

// The profile's section of the config file. "Configuration and credential file settings" (AWS CLI
// User Guide): `[default]` or `[profile NAME]`; botocore also reads `[profile default]`, which
// wins over `[default]`. Sections are matched on their whitespace-separated words.
const IniSection* config_profile(const IniFile& config, std::string_view profile) {
  for (const auto& [name, sec] : config) {
    std::vector<std::string_view> words;
    std::string_view rest = name;
    while (!(rest = trim(rest)).empty()) {
      const size_t e = std::min(rest.find_first_of(blanks), rest.size());
      words.push_back(rest.substr(0, e));
      rest = rest.substr(e);
    }
    if (words.size() == 2 && words[0] == "profile" && words[1] == profile) return &sec;
  }
  return profile == "default" ? section(config, "default") : nullptr;
}

// `[services NAME]` of the config file (words as above).
const IniSection* services_section(const IniFile& config, std::string_view services) {
  for (const auto& [name, sec] : config) {
    std::string_view n = trim(name);
    if (n.substr(0, 8) == "services" && n.size() > 8 && blanks.find(n[8]) != std::string_view::npos &&
        trim(n.substr(8)) == services)
      return &sec;
  }
  return nullptr;
}

bool region_ok(std::string_view r) noexcept {
  if (r.empty() || r.size() > 63 || r.front() == '-' || r.back() == '-') return false;
  for (char c : r)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

AddressingStyle addressing_style(std::string_view value, std::string_view what) {
  const std::string v = lower(trim(value));
  if (v == "path") return AddressingStyle::path;
  if (v == "virtual") return AddressingStyle::virtual_hosted;
  if (v == "auto") return AddressingStyle::automatic;
  throw Error(ErrorKind::invalid_config, std::string(what), "",
              "addressing style must be path, virtual or auto, got '" + std::string(value.substr(0, 64)) + "'");
}

// Static keys of one section; false when it has none. Half a pair is an error, as in botocore.
bool static_keys(const IniSection* s, std::string_view where, AwsCredentials& out) {
  const std::string* id = value_of(s, "aws_access_key_id");
  const std::string* secret = value_of(s, "aws_secret_access_key");
  if (!id && !secret) return false;
  if (!id || !secret)
    throw Error(ErrorKind::invalid_config, std::string(where), "",
                std::string("the profile has ") + (id ? "aws_access_key_id but no aws_secret_access_key"
                                                      : "aws_secret_access_key but no aws_access_key_id"));
  out.access_key_id = *id;
  out.secret_access_key = *secret;
  const std::string* token = value_of(s, "aws_session_token");
  if (!token) token = value_of(s, "aws_security_token");
  out.session_token = token ? *token : std::string();
  return true;
}

std::filesystem::path expand_home(const EnvMap& env, std::string_view p) {
  if (p.substr(0, 2) == "~/")
    if (const std::string* home = env_get(env, "HOME")) return std::filesystem::path(*home) / std::string(p.substr(2));
  return std::filesystem::path(std::string(p));
}

}  // namespace

IniFile parse_aws_ini(std::string_view text, std::string_view file_name) {
  if (text.size() > max_ini_bytes) bad_file(file_name, 0, "larger than " + std::to_string(max_ini_bytes) + " bytes");
  IniFile file;
  IniSection* current = nullptr;
  std::string* value = nullptr;  // the last option's value (continuation lines extend it)
  std::map<std::string, std::string, std::less<>>* nested = nullptr;  // its nested block, when it opened one
  size_t key_indent = 0, line_no = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view raw = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (++line_no > max_ini_lines) bad_file(file_name, 0, "more than " + std::to_string(max_ini_lines) + " lines");
    const std::string_view line = trim(raw);
    if (line.empty()) {  // a blank line ends a value
      value = nullptr;
      nested = nullptr;
      continue;
    }
    if (line.front() == '#' || line.front() == ';') continue;
    const size_t indent = raw.find_first_not_of(blanks);
    if (value && indent > key_indent) {  // continuation of the last option
      if (nested) {
        std::string k, v;
        if (!split_option(line, k, v)) bad_file(file_name, line_no, "a nested line needs 'key = value'");
        (*nested)[k] = v;
      } else {
        *value += '\n';
        value->append(line);
      }
      continue;
    }
    value = nullptr;
    nested = nullptr;
    if (line.front() == '[') {
      // ConfigParser's `\[(?P<header>.+)\]`, unanchored: up to the last ']', the rest ignored
      const size_t close = line.rfind(']');
      if (close == std::string_view::npos) bad_file(file_name, line_no, "a section header must end with ']'");
      const std::string name(trim(line.substr(1, close - 1)));
      if (name.empty()) bad_file(file_name, line_no, "empty section name");
      auto [it, inserted] = file.try_emplace(name);
      if (!inserted) bad_file(file_name, line_no, "section [" + name.substr(0, 64) + "] given twice");
      current = &it->second;
      continue;
    }
    if (!current) bad_file(file_name, line_no, "an option before any [section]");
    std::string k, v;
    if (!split_option(line, k, v)) bad_file(file_name, line_no, "expected 'key = value'");
    auto [it, inserted] = current->values.try_emplace(k, v);
    if (!inserted) bad_file(file_name, line_no, "option '" + k.substr(0, 64) + "' given twice in its section");
    value = &it->second;
    key_indent = indent;
    if (v.empty()) nested = &current->nested[k];  // `s3 =` then indented `key = value` lines
  }
  // A key with an empty value and no indented lines opened no block.
  for (auto& [name, sec] : file)
    for (auto it = sec.nested.begin(); it != sec.nested.end();) it = it->second.empty() ? sec.nested.erase(it) : ++it;
  return file;
}

S3Config resolve_s3_config(const EnvMap& env, const AwsFiles& files, bool force_anonymous) {
  const IniFile creds = parse_aws_ini(files.credentials, files.credentials_name);
  const IniFile config = parse_aws_ini(files.config, files.config_name);
  S3Config out;

  // Profile: AWS_PROFILE ("Shared config and credentials files", AWS SDKs and Tools Reference
  // Guide), or AWS_DEFAULT_PROFILE (botocore reads it first: configprovider.py, 'profile'), else
  // "default". Both set to different profiles is refused: boto3 would sign as one, the AWS CLI and
  // the other SDKs as the other. A profile asked for by name must exist in one of the files.
  const std::string* by_profile = env_get(env, "AWS_PROFILE");
  const std::string* by_default = env_get(env, "AWS_DEFAULT_PROFILE");
  if (by_profile && by_default && *by_profile != *by_default)
    throw Error(ErrorKind::invalid_config, "AWS_PROFILE", "",
                "AWS_PROFILE ('" + by_profile->substr(0, 64) + "') and AWS_DEFAULT_PROFILE ('" +
                    by_default->substr(0, 64) +
                    "') name different profiles (boto3 takes the second, the AWS CLI v2 and other SDKs the "
                    "first): set one");
  const std::string* named = by_profile ? by_profile : by_default;
  const char* named_by = by_profile ? "AWS_PROFILE" : "AWS_DEFAULT_PROFILE";
  out.profile = named ? *named : "default";
  const IniSection* cred_sec = section(creds, out.profile);
  const IniSection* conf_sec = config_profile(config, out.profile);
  if (named && !cred_sec && !conf_sec)
    throw Error(ErrorKind::invalid_config, files.config_name, "",
                std::string(named_by) + " names profile '" + out.profile.substr(0, 64) + "', which neither " +
                    files.config_name + " nor " + files.credentials_name + " has");
  const std::string conf_where = files.config_name + " [" + out.profile + "]";
  const std::string cred_where = files.credentials_name + " [" + out.profile + "]";

  // Region ("AWS Region", SDKs and Tools Reference Guide): AWS_REGION, then AWS_DEFAULT_REGION
  // (the AWS CLI's name), then the profile's `region`, else us-east-1.
  std::string region_from;
  if (const std::string* r = env_get(env, "AWS_REGION")) {
    out.region = *r, region_from = "AWS_REGION";
  } else if (const std::string* d = env_get(env, "AWS_DEFAULT_REGION")) {
    out.region = *d, region_from = "AWS_DEFAULT_REGION";
  } else if (const std::string* p = value_of(conf_sec, "region")) {
    out.region = *p, region_from = conf_where;
  } else {
    out.region = "us-east-1";
  }
  if (!region_ok(out.region))
    throw Error(ErrorKind::invalid_config, region_from, "",
                "not a region name (lower-case letters, digits and '-'): '" + out.region.substr(0, 64) + "'");

  // Endpoint ("Service-specific endpoints", SDKs and Tools Reference Guide): AWS_ENDPOINT_URL_S3,
  // AWS_ENDPOINT_URL, the `s3` block of the profile's `services` section, the profile's
  // `endpoint_url`; none of them when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS (or the profile's
  // ignore_configured_endpoint_urls) is true. Default: AWS's endpoint of the region.
  bool ignore = false;
  if (const std::string* v = env_get(env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))
    ignore = truthy(*v, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
  else if (const std::string* p = value_of(conf_sec, "ignore_configured_endpoint_urls"))
    ignore = truthy(*p, conf_where + " ignore_configured_endpoint_urls");
  std::string endpoint;
  if (!ignore) {
    const std::string* service_url = nullptr;
    if (const std::string* s = value_of(conf_sec, "services")) {
      const IniSection* svc = services_section(config, *s);
      if (!svc)
        throw Error(ErrorKind::invalid_config, conf_where, "",
                    "services = " + s->substr(0, 64) + " names no [services " + s->substr(0, 64) + "] section");
      if (const auto it = svc->nested.find("s3"); it != svc->nested.end())
        if (const auto u = it->second.find("endpoint_url"); u != it->second.end() && !u->second.empty())
          service_url = &u->second;
    }
    if (const std::string* e = env_get(env, "AWS_ENDPOINT_URL_S3")) {
      endpoint = *e, out.endpoint_from = "AWS_ENDPOINT_URL_S3";
    } else if (const std::string* g = env_get(env, "AWS_ENDPOINT_URL")) {
      endpoint = *g, out.endpoint_from = "AWS_ENDPOINT_URL";
    } else if (service_url) {
      endpoint = *service_url, out.endpoint_from = files.config_name + " [services] s3 endpoint_url";
    } else if (const std::string* p = value_of(conf_sec, "endpoint_url")) {
      endpoint = *p, out.endpoint_from = conf_where + " endpoint_url";
    }
  }
  if (!endpoint.empty()) {
    out.endpoint = parse_endpoint(endpoint, out.endpoint_from);
    out.custom_endpoint = true;
  } else {
    out.endpoint = aws_endpoint(out.region);
    out.endpoint_from = "AWS (region " + out.region + ")";
  }

  // Addressing: CTSTREAM_S3_ADDRESSING, then the profile's `s3 =` block `addressing_style` (AWS CLI
  // User Guide, "AWS CLI S3 configuration"), else automatic.
  if (const std::string* a = env_get(env, "CTSTREAM_S3_ADDRESSING")) {
    out.addressing = addressing_style(*a, "CTSTREAM_S3_ADDRESSING");
  } else if (conf_sec) {
    if (const auto it = conf_sec->nested.find("s3"); it != conf_sec->nested.end())
      if (const auto s = it->second.find("addressing_style"); s != it->second.end())
        out.addressing = addressing_style(s->second, conf_where + " s3.addressing_style");
  }

  // Credentials ("Standardized credential providers", SDKs and Tools Reference Guide; the AWS CLI's
  // "Configuration settings and precedence"): environment variables, then the credentials file's
  // profile, then the config file's profile. Nothing found: unsigned requests (public buckets).
  if (force_anonymous) {
    out.credentials_from = "none (anonymous access asked for)";
    return out;
  }
  if (const std::string* a = env_get(env, "CTSTREAM_S3_ANONYMOUS"); a && truthy(*a, "CTSTREAM_S3_ANONYMOUS")) {
    out.credentials_from = "none (CTSTREAM_S3_ANONYMOUS)";
    return out;
  }
  const std::string* id = env_get(env, "AWS_ACCESS_KEY_ID");
  const std::string* secret = env_get(env, "AWS_SECRET_ACCESS_KEY");
  if (id || secret) {
    if (!id || !secret)
      throw Error(ErrorKind::invalid_config, "environment", "",
                  id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                     : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    out.credentials.access_key_id = *id;
    out.credentials.secret_access_key = *secret;
    const std::string* token = env_get(env, "AWS_SESSION_TOKEN");
    if (!token) token = env_get(env, "AWS_SECURITY_TOKEN");
    out.credentials.session_token = token ? *token : std::string();
    out.anonymous = false;
    out.credentials_from = "environment";
    return out;
  }
  if (static_keys(cred_sec, cred_where, out.credentials)) {
    out.anonymous = false;
    out.credentials_from = cred_where;
    return out;
  }
  if (static_keys(conf_sec, conf_where, out.credentials)) {
    out.anonymous = false;
    out.credentials_from = conf_where;
    return out;
  }
  // Sources this version cannot use: refused, so that a caller who set one up is not silently
  // sent unsigned requests (which a private bucket answers with 403).
  for (const IniSection* s : {cred_sec, conf_sec})
    for (const char* key : {"credential_process", "role_arn", "sso_session", "sso_start_url", "web_identity_token_file",
                            "credential_source"})
      if (value_of(s, key))
        throw Error(ErrorKind::unsupported, s == cred_sec ? cred_where : conf_where, "",
                    std::string("credentials from '") + key +
                        "' are not supported yet: put static keys in the profile or in AWS_ACCESS_KEY_ID / "
                        "AWS_SECRET_ACCESS_KEY (or set CTSTREAM_S3_ANONYMOUS=1 for a public bucket)");
  for (const char* var :
       {"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"})
    if (env_get(env, var))
      throw Error(ErrorKind::unsupported, "environment", "",
                  std::string(var) +
                      " is set, but web identity and container credentials are not supported yet: set "
                      "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or CTSTREAM_S3_ANONYMOUS=1 for a public bucket)");
  out.credentials_from = "none (anonymous)";
  return out;
}

std::filesystem::path aws_credentials_path(const EnvMap& env) {
  const std::string* p = env_get(env, "AWS_SHARED_CREDENTIALS_FILE");
  return expand_home(env, p ? std::string_view(*p) : "~/.aws/credentials");
}

std::filesystem::path aws_config_path(const EnvMap& env) {
  const std::string* p = env_get(env, "AWS_CONFIG_FILE");
  return expand_home(env, p ? std::string_view(*p) : "~/.aws/config");
}

// Whether `p` is the null device (a character device of /dev/null's number, whatever its name).
static bool is_dev_null(const std::filesystem::path& p) {
  struct stat a {
  }, b{};
  return ::stat(p.c_str(), &a) == 0 && S_ISCHR(a.st_mode) && ::stat("/dev/null", &b) == 0 && a.st_rdev == b.st_rdev;
}

EnvMap aws_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    if (name.substr(0, 4) == "AWS_" || name.substr(0, 12) == "CTSTREAM_S3_" || name == "HOME")
      env.emplace(std::string(name), std::string(kv.substr(eq + 1)));
  }
  return env;
}

S3Config load_s3_config(bool force_anonymous) {
  const EnvMap env = aws_environment();
  AwsFiles files;
  const std::filesystem::path cp = aws_credentials_path(env), fp = aws_config_path(env);
  files.credentials_name = cp.string();
  files.config_name = fp.string();
  FileIdentity id;
  // /dev/null (how CI and containers keep a user's files out, as the SDKs allow) reads as empty;
  // any other file that is not a regular one is still refused (a FIFO would block, /dev/zero never end).
  if (identify(cp, id) && !is_dev_null(cp)) files.credentials = read_small_file(cp, max_ini_bytes);
  if (identify(fp, id) && !is_dev_null(fp)) files.config = read_small_file(fp, max_ini_bytes);
  return resolve_s3_config(env, files, force_anonymous);
}

}  // namespace ctstream::io
