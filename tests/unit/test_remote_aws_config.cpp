// The AWS configuration chain (src/io/aws_config.hpp): INI parsing as botocore reads
// ~/.aws/config and ~/.aws/credentials, and the precedence of credentials, region, endpoint and
// addressing style, over an environment map and file texts (no real environment, no files).
#include <catch2/catch.hpp>
#include <string>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"

using namespace ctstream;
using namespace ctstream::io;

namespace {
ErrorKind ini_error(const std::string& text) {
  try {
    (void)parse_aws_ini(text, "config");
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::internal;
}
ErrorKind resolve_error(const EnvMap& env, const AwsFiles& files) {
  try {
    (void)resolve_s3_config(env, files);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::internal;
}
AwsFiles files(std::string credentials, std::string config) {
  AwsFiles f;
  f.credentials = std::move(credentials);
  f.config = std::move(config);
  return f;
}
}  // namespace

TEST_CASE("AWS INI files: sections, options, comments, nested blocks", "[remote]") {
  const IniFile f = parse_aws_ini(
      "# comment\n"
      "; another\n"
      "[default]\r\n"
      "region = eu-west-1\n"
      "Output: json\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "  max_concurrent_requests=4\n"
      "\n"
      "[profile dev]\n"
      "endpoint_url = http://127.0.0.1:9000\n"
      "note = first\n"
      "   second line\n"
      "empty =\n"
      "[services local]\n"
      "s3 =\n"
      "\tendpoint_url = http://localhost:8080\n",
      "config");
  REQUIRE(f.size() == 3);
  const IniSection& d = f.at("default");
  CHECK(d.values.at("region") == "eu-west-1");
  CHECK(d.values.at("output") == "json");  // keys fold to lower case, ':' delimits too
  CHECK(d.nested.at("s3").at("addressing_style") == "path");
  CHECK(d.nested.at("s3").at("max_concurrent_requests") == "4");
  const IniSection& dev = f.at("profile dev");
  CHECK(dev.values.at("endpoint_url") == "http://127.0.0.1:9000");  // split at the first '=' only
  CHECK(dev.values.at("note") == "first\nsecond line");
  CHECK(dev.values.at("empty").empty());
  CHECK(dev.nested.count("empty") == 0);
  CHECK(f.at("services local").nested.at("s3").at("endpoint_url") == "http://localhost:8080");
  CHECK(parse_aws_ini("", "config").empty());
  CHECK(parse_aws_ini("[ spaced name ]\nk=v", "config").count("spaced name") == 1);
  CHECK(parse_aws_ini("[default] ; trailing\nk=v", "config").count("default") == 1);  // as ConfigParser

  CHECK(ini_error("region = x\n") == ErrorKind::invalid_config);  // before any section
  CHECK(ini_error("[default\nregion = x\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[]\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[a]\njust words\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[a]\n= value\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[a]\n[a]\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[a]\nk = 1\nK = 2\n") == ErrorKind::invalid_config);
  CHECK(ini_error("[a]\ns3 =\n  no delimiter\n") == ErrorKind::invalid_config);
  CHECK(ini_error(std::string(max_ini_bytes + 1, '#')) == ErrorKind::invalid_config);
  std::string many;
  for (size_t i = 0; i <= max_ini_lines; ++i) many += "#\n";
  CHECK(ini_error(many) == ErrorKind::invalid_config);
  try {
    (void)parse_aws_ini("[a]\nk = 1\nbroken\n", "/home/u/.aws/config");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("line 3") != std::string::npos);
    CHECK(e.file() == "/home/u/.aws/config");
  }
}

TEST_CASE("AWS credentials: environment, credentials file, config file, anonymous", "[remote]") {
  const std::string cred_file =
      "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = secretfile\n"
      "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = secretdev\naws_session_token = tokdev\n";
  const std::string conf_file =
      "[default]\nregion = eu-central-1\n"
      "[profile cfg]\naws_access_key_id = AKIDCFG\naws_secret_access_key = secretcfg\n"
      "[profile dev]\naws_access_key_id = AKIDDEVCFG\naws_secret_access_key = x\n"
      "[profile sso]\nsso_session = corp\n"
      "[profile proc]\ncredential_process = /bin/creds\n";

  // environment variables first, even with AWS_PROFILE set
  S3Config c = resolve_s3_config({{"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                  {"AWS_SECRET_ACCESS_KEY", "secretenv"},
                                  {"AWS_SESSION_TOKEN", "tokenv"},
                                  {"AWS_PROFILE", "dev"}},
                                 files(cred_file, conf_file));
  CHECK_FALSE(c.anonymous);
  CHECK(c.credentials.access_key_id == "AKIDENV");
  CHECK(c.credentials.secret_access_key == "secretenv");
  CHECK(c.credentials.session_token == "tokenv");
  CHECK(c.credentials_from == "environment");

  // then the credentials file's profile, which wins over the config file's
  c = resolve_s3_config({{"AWS_PROFILE", "dev"}}, files(cred_file, conf_file));
  CHECK(c.credentials.access_key_id == "AKIDDEV");
  CHECK(c.credentials.session_token == "tokdev");
  CHECK(c.profile == "dev");
  c = resolve_s3_config({}, files(cred_file, conf_file));
  CHECK(c.credentials.access_key_id == "AKIDFILE");
  CHECK(c.credentials.session_token.empty());
  // AWS_DEFAULT_PROFILE, which botocore reads (a red-team pass: it was ignored, and [default]'s
  // keys signed as another identity); with AWS_PROFILE naming another profile, refused
  c = resolve_s3_config({{"AWS_DEFAULT_PROFILE", "dev"}}, files(cred_file, conf_file));
  CHECK(c.credentials.access_key_id == "AKIDDEV");
  CHECK(c.profile == "dev");
  c = resolve_s3_config({{"AWS_DEFAULT_PROFILE", "dev"}, {"AWS_PROFILE", "dev"}}, files(cred_file, conf_file));
  CHECK(c.credentials.access_key_id == "AKIDDEV");
  CHECK(resolve_error({{"AWS_DEFAULT_PROFILE", "dev"}, {"AWS_PROFILE", "cfg"}}, files(cred_file, conf_file)) ==
        ErrorKind::invalid_config);
  CHECK(resolve_error({{"AWS_DEFAULT_PROFILE", "nope"}}, files(cred_file, conf_file)) == ErrorKind::invalid_config);
  // then the config file's `[profile NAME]`
  c = resolve_s3_config({{"AWS_PROFILE", "cfg"}}, files(cred_file, conf_file));
  CHECK(c.credentials.access_key_id == "AKIDCFG");
  CHECK(c.credentials_from == "~/.aws/config [cfg]");

  // nothing anywhere: unsigned requests
  c = resolve_s3_config({}, files("", ""));
  CHECK(c.anonymous);
  CHECK(c.credentials.access_key_id.empty());
  // anonymous on request, whatever is configured
  c = resolve_s3_config({{"AWS_ACCESS_KEY_ID", "A"}, {"AWS_SECRET_ACCESS_KEY", "S"}}, files(cred_file, ""), true);
  CHECK(c.anonymous);
  CHECK(c.credentials.secret_access_key.empty());
  c = resolve_s3_config({{"CTSTREAM_S3_ANONYMOUS", "1"}}, files(cred_file, ""));
  CHECK(c.anonymous);
  c = resolve_s3_config({{"CTSTREAM_S3_ANONYMOUS", "0"}}, files(cred_file, ""));
  CHECK_FALSE(c.anonymous);
  CHECK(resolve_error({{"CTSTREAM_S3_ANONYMOUS", "maybe"}}, files("", "")) == ErrorKind::invalid_config);
  // empty variables count as unset
  c = resolve_s3_config({{"AWS_ACCESS_KEY_ID", ""}, {"AWS_SECRET_ACCESS_KEY", ""}}, files(cred_file, ""));
  CHECK(c.credentials.access_key_id == "AKIDFILE");

  // half a key pair, a missing named profile: configuration errors
  CHECK(resolve_error({{"AWS_ACCESS_KEY_ID", "A"}}, files("", "")) == ErrorKind::invalid_config);
  CHECK(resolve_error({{"AWS_SECRET_ACCESS_KEY", "S"}}, files("", "")) == ErrorKind::invalid_config);
  CHECK(resolve_error({}, files("[default]\naws_access_key_id = A\n", "")) == ErrorKind::invalid_config);
  CHECK(resolve_error({{"AWS_PROFILE", "nope"}}, files(cred_file, conf_file)) == ErrorKind::invalid_config);
  // credential sources this version cannot use are refused, not turned into unsigned requests
  CHECK(resolve_error({{"AWS_PROFILE", "sso"}}, files("", conf_file)) == ErrorKind::unsupported);
  CHECK(resolve_error({{"AWS_PROFILE", "proc"}}, files("", conf_file)) == ErrorKind::unsupported);
  CHECK(resolve_error({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"}}, files("", "")) == ErrorKind::unsupported);
  CHECK(resolve_error({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"}}, files("", "")) ==
        ErrorKind::unsupported);

  // no error message carries a secret
  try {
    (void)resolve_s3_config({{"AWS_SECRET_ACCESS_KEY", "SENTINELSECRET"}}, files("", ""));
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("SENTINELSECRET") == std::string::npos);
  }
}

TEST_CASE("AWS region precedence", "[remote]") {
  const std::string conf = "[default]\nregion = eu-central-1\n[profile p]\nregion = ap-south-1\n";
  CHECK(resolve_s3_config({}, files("", "")).region == "us-east-1");
  CHECK(resolve_s3_config({}, files("", conf)).region == "eu-central-1");
  CHECK(resolve_s3_config({{"AWS_PROFILE", "p"}}, files("", conf)).region == "ap-south-1");
  CHECK(resolve_s3_config({{"AWS_DEFAULT_REGION", "us-west-2"}}, files("", conf)).region == "us-west-2");
  CHECK(
      resolve_s3_config({{"AWS_REGION", "eu-north-1"}, {"AWS_DEFAULT_REGION", "us-west-2"}}, files("", conf)).region ==
      "eu-north-1");
  // `[profile default]` wins over `[default]` (botocore)
  CHECK(resolve_s3_config({}, files("", "[default]\nregion = a-1\n[profile default]\nregion = b-2\n")).region == "b-2");
  CHECK(resolve_s3_config({}, files("", conf)).endpoint.host == "s3.eu-central-1.amazonaws.com");
  for (const std::string& bad : {std::string("EU-WEST-1"), std::string("us-east-1:evil"), std::string("a b"),
                                 std::string("-x"), std::string(64, 'a')})
    CHECK(resolve_error({{"AWS_REGION", bad}}, files("", "")) == ErrorKind::invalid_config);
}

TEST_CASE("AWS endpoint precedence and addressing style", "[remote]") {
  const std::string conf =
      "[default]\nendpoint_url = http://profile:1\nservices = local\n"
      "s3 =\n  addressing_style = virtual\n"
      "[services local]\ns3 =\n  endpoint_url = http://services:2\n"
      "[profile plain]\nendpoint_url = http://plain:3\n"
      "[profile ignoring]\nendpoint_url = http://plain:3\nignore_configured_endpoint_urls = true\n"
      "[profile broken]\nservices = missing\n"
      "[profile badstyle]\ns3 =\n  addressing_style = sideways\n";
  auto endpoint = [&](const EnvMap& env) {
    const S3Config c = resolve_s3_config(env, files("", conf));
    std::string s = std::string(c.endpoint.https ? "https://" : "http://") + c.endpoint.host;
    if (c.endpoint.port) {  // (not ":" + to_string: GCC 12's -Wrestrict false positive)
      s += ':';
      s += std::to_string(c.endpoint.port);
    }
    return s;
  };
  CHECK(endpoint({{"AWS_ENDPOINT_URL_S3", "http://s3env:4"}, {"AWS_ENDPOINT_URL", "http://env:5"}}) ==
        "http://s3env:4");
  CHECK(endpoint({{"AWS_ENDPOINT_URL", "http://env:5"}}) == "http://env:5");
  CHECK(endpoint({}) == "http://services:2");
  CHECK(endpoint({{"AWS_PROFILE", "plain"}}) == "http://plain:3");
  CHECK(endpoint({{"AWS_PROFILE", "ignoring"}, {"AWS_ENDPOINT_URL", "http://env:5"}}) ==
        "https://s3.us-east-1.amazonaws.com");
  CHECK(endpoint({{"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"}, {"AWS_ENDPOINT_URL", "http://env:5"}}) ==
        "https://s3.us-east-1.amazonaws.com");
  CHECK(resolve_s3_config({{"AWS_ENDPOINT_URL", "http://env:5"}}, files("", "")).custom_endpoint);
  CHECK_FALSE(resolve_s3_config({}, files("", "")).custom_endpoint);
  CHECK(resolve_error({{"AWS_PROFILE", "broken"}}, files("", conf)) == ErrorKind::invalid_config);
  CHECK(resolve_error({{"AWS_ENDPOINT_URL", "localhost:9000"}}, files("", "")) == ErrorKind::invalid_config);
  CHECK(resolve_error({{"AWS_ENDPOINT_URL", "http://key:secret@h"}}, files("", "")) == ErrorKind::invalid_config);

  CHECK(resolve_s3_config({}, files("", conf)).addressing == AddressingStyle::virtual_hosted);
  CHECK(resolve_s3_config({{"AWS_PROFILE", "plain"}}, files("", conf)).addressing == AddressingStyle::automatic);
  CHECK(resolve_s3_config({{"CTSTREAM_S3_ADDRESSING", "path"}}, files("", conf)).addressing == AddressingStyle::path);
  CHECK(resolve_error({{"AWS_PROFILE", "badstyle"}}, files("", conf)) == ErrorKind::invalid_config);
  CHECK(resolve_error({{"CTSTREAM_S3_ADDRESSING", "nope"}}, files("", "")) == ErrorKind::invalid_config);
}

TEST_CASE("AWS file paths from the environment", "[remote]") {
  CHECK(aws_credentials_path({{"HOME", "/home/u"}}) == "/home/u/.aws/credentials");
  CHECK(aws_config_path({{"HOME", "/home/u"}}) == "/home/u/.aws/config");
  CHECK(aws_config_path({{"HOME", "/home/u"}, {"AWS_CONFIG_FILE", "/etc/aws.cfg"}}) == "/etc/aws.cfg");
  CHECK(aws_credentials_path({{"HOME", "/h"}, {"AWS_SHARED_CREDENTIALS_FILE", "~/c"}}) == "/h/c");
}
