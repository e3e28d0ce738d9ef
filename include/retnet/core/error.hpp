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

/// Throws InvalidArgument(message) unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw InvalidArgument(message);
}

}  // namespace retnet
