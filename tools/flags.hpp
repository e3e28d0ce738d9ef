// The flags of the tools' commands, as typed members. Each command has a struct whose members
// are its flags' values and whose `declare(FlagTable&)` names every member's flag once, with
// its default, its range and its help line:
//
//   struct ScoreFlags {
//     std::string model;
//     retnet::Form mode;
//     std::optional<int> threads;
//     void declare(FlagTable& f) {
//       f.required(model, "-m", "DIR", "model folder");
//       f.choice(mode, "--mode", "M", retnet::Form::kChunkwise, kForms, "parallel | chunkwise");
//       declare_threads(f, threads);
//     }
//   };
//
// The same declarations parse the command line, check it and write --help
// (parse_command_line, flags_help), so a flag read under a wrong name does not compile. A bad
// flag is a UsageError with one line that names the command, the flag and the problem. A flag
// is given at most once ("--temp given twice"), except those declared as lists (`list`), whose
// values accumulate in order.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <retnet/retnet.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace retnet::tools {

/// A command line the declarations refuse (the tools exit with status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The inclusive range of an integer or floating-point flag.
template <typename T>
struct Range {
  T min, max;
};

/// T, in a parameter that takes its T from another argument (so that `{0, 100}` is a Range).
template <typename T>
using NotDeduced = typename std::enable_if<true, T>::type;

/// One value of an enumerated flag and the name it is given by.
template <typename T>
struct Choice {
  const char* name;
  T value;
};

/// How one flag's text becomes a value of type T. Integers are read as 64-bit and numbers as
/// doubles; anything malformed or outside the range is refused, never wrapped or saturated,
/// and so is a non-zero number too small for T to hold as a normal value (1e-320 would be 0 or
/// a subnormal: a temperature of 0 means greedy, not "tiny"). A refusal throws FlagValueError
/// with what follows the flag's name in the message.
namespace flag_values {

struct FlagValueError {
  std::string problem;
};

template <typename T>
std::string format(T x) {
  if constexpr (std::is_integral_v<T>) {
    return std::to_string(static_cast<long long>(x));
  } else if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream s;
    s << static_cast<double>(x);
    return s.str();
  } else {
    return std::string(x);
  }
}

/// The declared range, or without one every value T can hold.
template <typename T>
Range<T> effective_range(const std::optional<Range<T>>& range) {
  return range.value_or(Range<T>{std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()});
}

/// " must be in [min, max], got TEXT" when x (read as the wider type Wide) lies outside the
/// range or could not be held at all.
template <typename Wide, typename T>
void check_range(Wide x, bool overflow, const Range<T>& range, const std::string& text) {
  if (overflow || x < Wide(range.min) || x > Wide(range.max))
    throw FlagValueError{" must be in [" + format(range.min) + ", " + format(range.max) +
                         "], got " + text};
}

template <typename T>
T read(const std::string& text, const std::optional<Range<T>>& range) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else if constexpr (std::is_same_v<T, WeightType>) {
    try {
      return parse_weight_type(text);
    } catch (const InvalidArgument& e) {
      throw FlagValueError{std::string(": ") + e.what()};
    }
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(std::is_signed_v<T>, "integer flags are signed");
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0')
      throw FlagValueError{" expects an integer, got '" + text + "'"};
    check_range(x, errno == ERANGE, effective_range(range), text);
    return static_cast<T>(x);
  } else {
    static_assert(std::is_floating_point_v<T>, "flags are strings, integers, numbers or enums");
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(text.c_str(), &end);
    const bool out_of_range = errno == ERANGE;  // beyond a double's range, or below its normal
    if (text.empty() || *end != '\0' || std::isnan(x) || (std::isinf(x) && !out_of_range))
      throw FlagValueError{" expects a number, got '" + text + "'"};
    check_range(x, out_of_range && std::isinf(x), effective_range(range), text);
    const double smallest = static_cast<double>(std::numeric_limits<T>::min());
    if ((out_of_range && !std::isinf(x)) || (x != 0 && std::fabs(x) < smallest))
      throw FlagValueError{" must be 0 or of magnitude at least " + format(smallest) + ", got " +
                           text};
    return static_cast<T>(x);
  }
}

}  // namespace flag_values

/// The flags of one command, bound to the members of its struct: what a struct's
/// `declare(FlagTable&)` fills, and what parses the command line into those members.
class FlagTable {
 public:
  explicit FlagTable(std::string command) : command_(std::move(command)) {}

  /// A flag the command cannot run without: "NAME is required" when absent.
  template <typename T>
  void required(T& member, const char* name, const char* value_name, const char* help) {
    add(name, value_name, help, "", true,
        [&member](const std::string& text) { member = flag_values::read<T>(text, std::nullopt); });
  }

  /// A flag that may be absent (std::nullopt then), with the range of its values if any.
  template <typename T>
  void optional(std::optional<T>& member, const char* name, const char* value_name,
                const char* help) {
    add_optional(member, name, value_name, std::nullopt, help);
  }
  template <typename T>
  void optional(std::optional<T>& member, const char* name, const char* value_name,
                NotDeduced<Range<T>> range, const char* help) {
    add_optional(member, name, value_name, range, help);
  }

  /// A flag with a default (`fallback`, converted to T as a given value would be; shown in
  /// --help), with the range of its values if any.
  template <typename T, typename D>
  void value(T& member, const char* name, const char* value_name, D fallback, const char* help) {
    add_value(member, name, value_name, fallback, std::nullopt, help);
  }
  template <typename T, typename D>
  void value(T& member, const char* name, const char* value_name, D fallback,
             NotDeduced<Range<T>> range, const char* help) {
    add_value(member, name, value_name, fallback, range, help);
  }

  /// An enumerated flag: one of `choices` by name ("NAME must be a, b or c, got 'x'").
  template <typename T>
  void choice(T& member, const char* name, const char* value_name, T fallback,
              NotDeduced<std::vector<Choice<T>>> choices, const char* help) {
    member = fallback;
    std::string fallback_name, names;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (choices[i].value == fallback) fallback_name = choices[i].name;
      if (i > 0) names += i + 1 == choices.size() ? " or " : ", ";
      names += choices[i].name;
    }
    add(name, value_name, help, fallback_name, false,
        [&member, choices, names](const std::string& text) {
          const auto chosen = std::find_if(choices.begin(), choices.end(),
                                           [&](const Choice<T>& c) { return text == c.name; });
          if (chosen == choices.end())
            throw flag_values::FlagValueError{" must be " + names + ", got '" + text + "'"};
          member = chosen->value;
        });
  }

  /// A switch: true when given.
  void toggle(bool& member, const char* name, const char* help) {
    member = false;
    add(name, nullptr, help, "", false, [&member](const std::string&) { member = true; });
  }

  /// A flag that may be given any number of times: its values in the order given (none when
  /// absent). Every other flag is refused when given twice.
  template <typename T>
  void list(std::vector<T>& member, const char* name, const char* value_name, const char* help) {
    member.clear();
    add(name, value_name, help, "", false, [&member](const std::string& text) {
      member.push_back(flag_values::read<T>(text, std::nullopt));
    });
    slots_.back().repeatable = true;
  }

  /// Reads the arguments into the members: every given value is checked, and a flag that is
  /// not a list is refused when given twice. Returns whether -h or --help was among them, in
  /// which case a required flag may be missing.
  bool parse(int argc, char** argv) {
    bool help = false;
    std::vector<std::pair<Slot*, std::string>> given;
    for (int i = 0; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        help = true;
        continue;
      }
      Slot* slot = find(arg);
      if (!slot)
        throw UsageError(command_ + ": unknown argument '" + arg + "' (see retnet " + command_ +
                         " --help)");
      if (slot->value_name && i + 1 >= argc)
        throw UsageError(command_ + ": " + arg + " needs a value");
      if (!slot->repeatable &&
          std::any_of(given.begin(), given.end(), [&](const auto& g) { return g.first == slot; }))
        throw UsageError(command_ + ": " + arg + " given twice");
      given.emplace_back(slot, slot->value_name ? argv[++i] : "");
    }
    for (auto& [slot, text] : given) {
      try {
        slot->set(text);
      } catch (const flag_values::FlagValueError& e) {
        throw UsageError(command_ + ": " + slot->name + e.problem);
      }
      slot->given = true;
    }
    for (const Slot& slot : slots_)
      if (slot.required && !slot.given && !help)
        throw UsageError(command_ + ": " + slot.name + " is required");
    return help;
  }

  /// --help: the usage line, a summary, then a line per flag in the order declared.
  std::string help(const std::string& usage, const std::string& summary) const {
    std::string out = "usage: " + usage + "\n" + summary + "\n";
    for (const Slot& f : slots_) {
      std::string left = "  " + f.name + (f.value_name ? std::string(" ") + f.value_name : "");
      left.resize(std::max<size_t>(left.size() + 2, 24), ' ');
      out += left + f.help + (f.fallback.empty() ? "" : " (default " + f.fallback + ")") +
             (f.repeatable ? " (may be repeated)" : "") + "\n";
    }
    return out;
  }

 private:
  template <typename T>
  void add_optional(std::optional<T>& member, const char* name, const char* value_name,
                    NotDeduced<std::optional<Range<T>>> range, const char* help) {
    member.reset();
    add(name, value_name, help, "", false,
        [&member, range](const std::string& text) { member = flag_values::read<T>(text, range); });
  }

  template <typename T, typename D>
  void add_value(T& member, const char* name, const char* value_name, D fallback,
                 NotDeduced<std::optional<Range<T>>> range, const char* help) {
    member = static_cast<T>(fallback);
    add(name, value_name, help, flag_values::format(fallback), false,
        [&member, range](const std::string& text) { member = flag_values::read<T>(text, range); });
  }

  struct Slot {
    std::string name;
    const char* value_name;  // shown in --help: "N", "T", ...; nullptr for a switch
    std::string help, fallback;
    bool required;
    std::function<void(const std::string&)> set;  // parses, checks and stores a given value
    bool given = false;
    bool repeatable = false;  // a list: each value given is appended
  };

  void add(const char* name, const char* value_name, const char* help, std::string fallback,
           bool required, std::function<void(const std::string&)> set) {
    if (find(name)) throw std::logic_error(command_ + ": flag " + name + " declared twice");
    slots_.push_back({name, value_name, help, std::move(fallback), required, std::move(set)});
  }

  Slot* find(const std::string& name) {
    for (Slot& s : slots_)
      if (s.name == name) return &s;
    return nullptr;
  }

  std::string command_;
  std::vector<Slot> slots_;
};

/// A command's flags as read from its arguments (argv after the command's name).
template <typename Flags>
struct CommandLine {
  Flags flags;
  bool help = false;  // -h or --help: write flags_help and run nothing
};

/// Reads `argv` into a `Flags` (a struct whose `declare(FlagTable&)` names its members' flags).
template <typename Flags>
CommandLine<Flags> parse_command_line(const std::string& command, int argc, char** argv) {
  CommandLine<Flags> line;
  FlagTable table(command);
  line.flags.declare(table);
  line.help = table.parse(argc, argv);
  return line;
}

/// The --help text of `Flags`: the usage line, a summary, then a line per flag.
template <typename Flags>
std::string flags_help(const std::string& command, const std::string& usage,
                       const std::string& summary) {
  Flags flags;
  FlagTable table(command);
  flags.declare(table);
  return table.help(usage, summary);
}

/// Threads beyond a few per hardware thread only add overhead (and OpenMP fails somewhere in the
/// tens of thousands), so --threads is capped at 4 x the hardware's.
inline int max_threads() {
  return 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// --threads, on every command that computes: unset leaves every core to OpenMP.
inline void declare_threads(FlagTable& f, std::optional<int>& threads) {
  f.optional(threads, "--threads", "N", Range<int>{1, max_threads()},
             "threads (default: all cores; at most 4 x the hardware threads)");
}

/// --weights: the type of the linear maps (ops/weight_type.hpp), on every command that loads a
/// model; unset keeps the checkpoint's own.
inline void declare_weights(FlagTable& f, std::optional<WeightType>& weights) {
  f.optional(
      weights, "--weights", "T",
      "weight type: f32 | f16 | bf16 | q8 | q4 (default: the checkpoint's own, f32 if another)");
}

}  // namespace retnet::tools
