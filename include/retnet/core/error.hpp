// Exception types of the library. Every check that guards user input throws one of
// these, in release builds too, with a message that names the offending argument,
// file or tensor.
#pragma once

#include <stdexcept>
#include <string>

namespace retnet {

/// Base class of every exception the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A function argument is out of range or has the wrong shape.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A file (checkpoint, config, state, tokenizer) is malformed or does not match the model.
class FormatError : public Error {
 public:
  using Error::Error;
};

}  // namespace retnet

/// Throws retnet::InvalidArgument(message) unless `condition` holds, in every build type.
/// A macro so that the message (often built with std::to_string) is only made on failure:
/// checks in the decoding path then cost no allocation.
#define RETNET_REQUIRE(condition, message)                      \
  do {                                                          \
    if (!(condition)) throw ::retnet::InvalidArgument(message); \
  } while (false)
