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
//
// A flag may have several names, declared together: "-m|--model" (--help shows "-m, --model").
// A value follows its flag as the next argument, after '=' ("--temp=0.5", "-m=DIR"), or, for a
// one-letter flag, attached ("-n5"). An unknown flag close to a declared one is answered with
// "did you mean --temp?".
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

/// Whether a range's minimum is itself allowed.
enum class Bound { kInclusive, kExclusive };

/// The range of an integer or floating-point flag: [min, max], or (min, max] when the minimum is
/// excluded (`{0, 1, Bound::kExclusive}`: "--top-p must be in (0, 1], got 0").
template <typename T>
struct Range {
  T min, max;
  Bound min_bound = Bound::kInclusive;
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

/// " must be in [min, max], got TEXT" (or "(min, max]") when x (read as the wider type Wide)
/// lies outside the range or could not be held at all.
template <typename Wide, typename T>
void check_range(Wide x, bool overflow, const Range<T>& range, const std::string& text) {
  const bool exclusive = range.min_bound == Bound::kExclusive;
  const bool below = exclusive ? !(x > Wide(range.min)) : x < Wide(range.min);
  if (overflow || below || x > Wide(range.max))
    throw FlagValueError{" must be in " + std::string(exclusive ? "(" : "[") + format(range.min) +
                         ", " + format(range.max) + "], got " + text};
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

/// Levenshtein distance (insertions, deletions, substitutions), with a transposition of two
/// neighbours counted as one edit ("--tmep").
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

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
    struct Given {
      Slot* slot;
      std::string name, text;  // the name as typed: messages quote what the user wrote
    };
    std::vector<Given> given;
    for (int i = 0; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        help = true;
        continue;
      }
      const Split found = split(arg);
      Slot* const slot = found.slot;
      const std::string& name = found.name;
      const std::optional<std::string>& attached = found.attached;
      if (!slot) throw UsageError(command_ + ": unknown argument '" + arg + "'" + suggestion(arg));
      if (!slot->value_name && attached)
        throw UsageError(command_ + ": " + name + " takes no value, got '" + arg + "'");
      if (slot->value_name && !attached && i + 1 >= argc)
        throw UsageError(command_ + ": " + name + " needs a value");
      if (!slot->repeatable &&
          std::any_of(given.begin(), given.end(), [&](const Given& g) { return g.slot == slot; }))
        throw UsageError(command_ + ": " + name + " given twice");
      std::string text = attached ? *attached : slot->value_name ? argv[++i] : "";
      given.push_back({slot, name, std::move(text)});
    }
    for (Given& g : given) {
      try {
        g.slot->set(g.text);
      } catch (const flag_values::FlagValueError& e) {
        throw UsageError(command_ + ": " + g.name + e.problem);
      }
      g.slot->given = true;
    }
    for (const Slot& slot : slots_)
      if (slot.required && !slot.given && !help)
        throw UsageError(command_ + ": " + slot.names[0] + " is required");
    return help;
  }

  /// --help: the usage line, a summary, then a line per flag in the order declared.
  std::string help(const std::string& usage, const std::string& summary) const {
    std::string out = "usage: " + usage + "\n" + summary + "\n";
    for (const Slot& f : slots_) {
      std::string left = " ";
      for (size_t k = 0; k < f.names.size(); ++k) left += (k ? ", " : " ") + f.names[k];
      if (f.value_name) left += std::string(" ") + f.value_name;
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
    std::vector<std::string> names;  // the first one names the flag in messages
    const char* value_name;          // shown in --help: "N", "T", ...; nullptr for a switch
    std::string help, fallback;
    bool required;
    std::function<void(const std::string&)> set;  // parses, checks and stores a given value
    bool given = false;
    bool repeatable = false;  // a list: each value given is appended
  };

  /// "-m|--model" as its names.
  static std::vector<std::string> split_names(const std::string& declared) {
    std::vector<std::string> names;
    size_t begin = 0;
    while (true) {
      const size_t end = std::min(declared.find('|', begin), declared.size());
      names.push_back(declared.substr(begin, end - begin));
      if (end == declared.size()) return names;
      begin = end + 1;
    }
  }

  void add(const char* declared, const char* value_name, const char* help, std::string fallback,
           bool required, std::function<void(const std::string&)> set) {
    std::vector<std::string> names = split_names(declared);
    for (const std::string& name : names)
      if (name.size() < 2 || name[0] != '-' || name.find('=') != std::string::npos || find(name))
        throw std::logic_error(command_ + ": flag " + name + " declared twice or malformed");
    slots_.push_back(
        {std::move(names), value_name, help, std::move(fallback), required, std::move(set)});
  }

  Slot* find(const std::string& name) {
    for (Slot& s : slots_)
      if (std::find(s.names.begin(), s.names.end(), name) != s.names.end()) return &s;
    return nullptr;
  }

  struct Split {
    Slot* slot;                           // nullptr: no flag of this command
    std::string name;                     // the flag's name as typed
    std::optional<std::string> attached;  // a value given in the same argument
  };

  /// An argument as a flag: "--temp", "--temp=0.5", "-m=DIR" or "-n5" (one-letter flags only).
  Split split(const std::string& arg) {
    if (Slot* slot = find(arg)) return {slot, arg, std::nullopt};
    const size_t equals = arg.find('=');
    if (equals != std::string::npos)
      if (Slot* slot = find(arg.substr(0, equals)))
        return {slot, arg.substr(0, equals), arg.substr(equals + 1)};
    if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-')
      if (Slot* slot = find(arg.substr(0, 2)); slot && slot->value_name)
        return {slot, arg.substr(0, 2), arg.substr(2)};
    return {nullptr, arg, std::nullopt};
  }

  /// " (did you mean --temp?)" when a declared name is a typo or two away from the flag part of
  /// `arg`, else the pointer to --help.
  std::string suggestion(const std::string& arg) const {
    const std::string typed = arg.substr(0, arg.find('='));
    const std::string* best = nullptr;
    size_t best_distance = std::numeric_limits<size_t>::max();
    for (const Slot& slot : slots_)
      for (const std::string& name : slot.names) {
        const size_t d = edit_distance(typed, name);
        if (d < best_distance) best_distance = d, best = &name;
      }
    // None in a one-letter flag, one in a short name, two in a longer one: beyond that the
    // guess is noise.
    const size_t allowed = typed.size() <= 3 ? 0 : typed.size() <= 5 ? 1 : 2;
    if (typed.size() > 1 && typed[0] == '-' && best && best_distance <= allowed)
      return " (did you mean " + *best + "?)";
    return " (see retnet " + command_ + " --help)";
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

/// --threads, on every command that computes: unset takes every core. A ceiling: while other
/// programs hold cores, the library's pool leaves them (core/thread_pool.hpp).
inline void declare_threads(FlagTable& f, std::optional<int>& threads) {
  f.optional(
      threads, "--threads", "N", Range<int>{1, max_threads()},
      "threads at most (default: all cores; fewer while other programs hold cores; at most 4 "
      "x the hardware threads)");
}

/// --bf16-dots: bf16 weights' products round x to bfloat16 too (LoadOptions::bf16_dots).
inline void declare_bf16_dots(FlagTable& f, bool& bf16_dots) {
  f.toggle(bf16_dots, "--bf16-dots",
           "bf16 weights only: round x to bfloat16 inside the products too, on vdpbf16ps where "
           "the CPU has AVX512-BF16 (about twice the prompt rate; docs/NUMERICS.md)");
}

/// --weights (the type of the linear maps, ops/weight_type.hpp; unset keeps the checkpoint's own)
/// and --bf16-dots, on every command that loads a model for inference.
inline void declare_load(FlagTable& f, LoadOptions& load) {
  f.optional(
      load.weights, "--weights", "T",
      "weight type: f32 | f16 | bf16 | q8 | q4 (default: the checkpoint's own, f32 if another)");
  declare_bf16_dots(f, load.bf16_dots);
}

}  // namespace retnet::tools
