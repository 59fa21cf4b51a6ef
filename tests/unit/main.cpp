#define CATCH_CONFIG_MAIN
// Catch2's runner instantiates <regex>, which trips GCC 12's -Wmaybe-uninitialized false
// positive (PR 105562) in the sanitizer build; silenced for this header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <catch2/catch.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
