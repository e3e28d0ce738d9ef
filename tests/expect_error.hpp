// Test helper: runs a callable that must throw E, whose message must contain given snippets.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

namespace retnet::testing {

// Runs `f`, expecting an exception of type E whose what() contains every string in
// `snippets`. Returns the message ("" if nothing was thrown); other exceptions propagate.
template <typename E, typename F>
std::string expect_error(F&& f, const std::vector<std::string>& snippets) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& s : snippets)
      EXPECT_NE(message.find(s), std::string::npos) << "'" << s << "' not in: " << message;
    return message;
  }
  std::string wanted;
  for (const std::string& s : snippets) wanted += (wanted.empty() ? "'" : ", '") + s + "'";
  ADD_FAILURE() << "no exception thrown; expected " << typeid(E).name()
                << " with a message containing " << wanted;
  return "";
}

}  // namespace retnet::testing
