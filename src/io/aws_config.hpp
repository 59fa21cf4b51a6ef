// io — where an s3:// request goes and how it is signed: the AWS credential, region, endpoint and
// addressing chain, as pure functions over an environment map and the texts of
// ~/.aws/credentials and ~/.aws/config (plus one loader that reads the real ones). Precedence
// follows the AWS SDKs and Tools Reference Guide; each rule cites its page in aws_config.cpp.
// Supported credential sources: environment variables and static keys in a profile. Anything
// else a profile may name (SSO, credential_process, assume-role, web identity, container / IMDS
// credentials) is refused with Error{unsupported} rather than silently sending unsigned requests.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "io/url.hpp"

namespace ctstream::io {

/// One section of an AWS INI file: `key = value` pairs (keys lower-cased, as botocore's
/// ConfigParser folds them) and nested blocks (`s3 =` followed by indented `key = value` lines).
struct IniSection {
  std::map<std::string, std::string, std::less<>> values;
  std::map<std::string, std::map<std::string, std::string, std::less<>>, std::less<>> nested;
};
/// Sections by name as written between the brackets (blanks trimmed), e.g. "default",
/// "profile dev", "services local".
using IniFile = std::map<std::string, IniSection, std::less<>>;

/// Caps on an INI file: larger files are refused, not truncated.
inline constexpr size_t max_ini_bytes = 1 << 20;
inline constexpr size_t max_ini_lines = 20000;

/// Parses an AWS config or credentials file (the subset botocore's configloader reads: `[section]`
/// headers, `key = value` or `key: value`, full-line `#`/`;` comments, indented continuation lines,
/// nested blocks). Error{invalid_config} naming `file_name` and the line: text over the caps, a key
/// outside a section, a line without a delimiter, an empty key or section name, a section or key
/// given twice (botocore refuses both too).
IniFile parse_aws_ini(std::string_view text, std::string_view file_name);

/// Environment variables by name (only the AWS_* and CTSTREAM_S3_* ones matter).
using EnvMap = std::map<std::string, std::string, std::less<>>;

struct AwsCredentials {
  std::string access_key_id, secret_access_key, session_token;  // never printed
};

/// The two files' texts and the names errors give them.
struct AwsFiles {
  std::string credentials, config;
  std::string credentials_name = "~/.aws/credentials", config_name = "~/.aws/config";
};

/// Everything an S3 request needs besides the URL.
struct S3Config {
  std::string profile;  ///< the profile the files were read for
  std::string region;   ///< validated: [a-z0-9-]+
  Endpoint endpoint;    ///< configured, or AWS's for the region
  bool custom_endpoint = false;
  std::string endpoint_from;  ///< where the endpoint came from (for messages)
  AddressingStyle addressing = AddressingStyle::automatic;
  bool anonymous = true;  ///< unsigned requests (no credentials found, or asked for)
  AwsCredentials credentials;
  std::string credentials_from;  ///< "environment", "~/.aws/credentials [dev]", "none (anonymous)", ...
};

/// Resolves the configuration from `env` and the files (empty texts = absent files).
/// `force_anonymous` (and CTSTREAM_S3_ANONYMOUS=1) skip every credential source. Errors:
/// Error{invalid_config} for malformed files or values, a named profile that does not exist,
/// half a key pair; Error{unsupported} for a credential source this version cannot use.
S3Config resolve_s3_config(const EnvMap& env, const AwsFiles& files, bool force_anonymous = false);

/// The paths of the two files: AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else under
/// $HOME/.aws (a leading "~/" expands to $HOME).
std::filesystem::path aws_credentials_path(const EnvMap& env);
std::filesystem::path aws_config_path(const EnvMap& env);

/// The process environment's AWS_* and CTSTREAM_S3_* variables.
EnvMap aws_environment();

/// resolve_s3_config over the process environment and the files it names (read with a size cap;
/// an absent file is an empty one).
S3Config load_s3_config(bool force_anonymous = false);

}  // namespace ctstream::io
