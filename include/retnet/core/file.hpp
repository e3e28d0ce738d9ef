// Opening untrusted input files, and quoting their contents in error messages.
//
// Every reader of the library (config.json, the sharded index, safetensors shards, state files)
// opens its file through open_regular_file(): only a regular file is opened, so a FIFO cannot
// block the process forever and a directory cannot surface as a raw stream error. Files of a
// model folder are found through path_in_folder(), which resolves symbolic links and refuses a
// file that lies outside the folder. Whatever part of a file's content appears in an error
// message goes through excerpt() (or name_excerpt()): bounded and escaped, on one line. A
// symbolic link that leads nowhere (dangling, or a loop) is named as such, never taken for an
// absent file (entry_exists()).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "retnet/core/error.hpp"

namespace retnet {

namespace detail {

// The one escaping routine: printable ASCII as is, `"` and `\` backslashed, every other byte as
// \xNN; at most `max_bytes` bytes of `text`, then "... (N bytes)".
inline std::string escape_bounded(std::string_view text, size_t max_bytes) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  const size_t shown = text.size() < max_bytes ? text.size() : max_bytes;
  out.reserve(shown + 24);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

inline bool plain_name(std::string_view text, size_t max_bytes) {
  if (text.empty() || text.size() > max_bytes) return false;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
  }
  return true;
}

}  // namespace detail

/// Bytes of an untrusted file quoted for an error message: in double quotes, escaped (printable
/// ASCII as is, other bytes as \xNN) and cut after `max_bytes` bytes with "... (N bytes)".
inline std::string excerpt(std::string_view text, size_t max_bytes = 40) {
  return "\"" + detail::escape_bounded(text, max_bytes) + "\"";
}

/// A name read from a file (a tensor, a shard, a key) for an error message: as is when it is
/// printable ASCII without spaces or quotes and at most `max_bytes` long (every real tensor
/// name), else as excerpt(). So "tensor layers.0.ffn.fc1.weight" reads as before while a name
/// holding a newline, a terminal escape or a megabyte of text cannot break the one-line message.
inline std::string name_excerpt(std::string_view name, size_t max_bytes = 120) {
  return detail::plain_name(name, max_bytes) ? std::string(name) : excerpt(name, max_bytes);
}

namespace detail {

/// Throws the FormatError that names why symbolic link `path` leads nowhere ("PATH: is a
/// symbolic link to X, which does not exist", "... in a loop of links"); returns when `path` is
/// not a link or its target exists.
inline void refuse_unresolved_link(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::symlink_status(path, ec).type() != fs::file_type::symlink) return;
  const fs::file_status target = fs::status(path, ec);
  if (!ec && target.type() != fs::file_type::not_found) return;
  if (ec == std::errc::too_many_symbolic_link_levels)
    throw FormatError(path + ": is a symbolic link in a loop of links (it never reaches a file)");
  std::error_code read_ec;
  const fs::path to = fs::read_symlink(path, read_ec);
  if (target.type() == fs::file_type::not_found)
    throw FormatError(path + ": is a symbolic link to " + excerpt(to.string(), 200) +
                      ", which does not exist");
  throw FormatError(path + ": cannot follow the symbolic link to " + excerpt(to.string(), 200) +
                    " (" + ec.message() + ")");
}

}  // namespace detail

/// Whether `path` names something (a file, a folder, a link that resolves), for a caller that
/// treats an absent optional file as not given. A symbolic link that does not resolve is not
/// absent: it is a FormatError (detail::refuse_unresolved_link), since an interrupted download
/// leaves such links and running without the file would silently change the results. A path
/// that cannot be examined (a folder without search permission) is a FormatError too.
inline bool entry_exists(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  if (own.type() == fs::file_type::not_found) return false;
  if (ec) throw FormatError(path + ": cannot examine (" + ec.message() + ")");
  detail::refuse_unresolved_link(path);
  return true;
}

/// Refuses `dir` unless it is a folder (symbolic links followed): FormatError "DIR: no such
/// folder", "DIR: is a regular file, expected a folder: give the folder that holds it, PARENT"
/// (a tokenizer.json or model.safetensors named instead of its folder), and the like. For a
/// reader that would otherwise read an absent folder as an empty one.
inline void require_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::directory) return;
  detail::refuse_unresolved_link(dir);
  if (status.type() == fs::file_type::not_found) throw FormatError(dir + ": no such folder");
  if (status.type() == fs::file_type::regular) {
    const std::string parent = fs::path(dir).parent_path().string();
    throw FormatError(dir +
                      ": is a regular file, expected a folder: give the folder that holds it, " +
                      (parent.empty() ? std::string(".") : parent));
  }
  throw FormatError(dir + ": is not a folder" + (ec ? " (" + ec.message() + ")" : std::string()));
}

/// Opens `path` for binary reading if it is a regular file (symbolic links followed); a
/// directory, FIFO, socket or device is refused before it is opened, since opening a FIFO
/// blocks until a writer appears and a directory fails only on the first read. Throws
/// FormatError "PATH: ..." naming what was found. `size`, when given, receives the file size.
/// (A file swapped for a FIFO between the check and the open is not guarded against.)
inline std::ifstream open_regular_file(const std::string& path, uint64_t* size = nullptr) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  switch (status.type()) {
    case fs::file_type::regular:
      break;
    case fs::file_type::not_found:
      detail::refuse_unresolved_link(path);
      throw FormatError(path + ": cannot open: no such file");
    case fs::file_type::directory:
      throw FormatError(path + ": is a directory, expected a regular file");
    case fs::file_type::fifo:
      throw FormatError(path + ": is a FIFO (named pipe), expected a regular file");
    case fs::file_type::socket:
      throw FormatError(path + ": is a socket, expected a regular file");
    case fs::file_type::block:
    case fs::file_type::character:
      throw FormatError(path + ": is a device, expected a regular file");
    default:
      detail::refuse_unresolved_link(path);
      throw FormatError(path + ": cannot open" + (ec ? " (" + ec.message() + ")" : std::string()) +
                        ": expected a regular file");
  }
  if (size) {
    *size = fs::file_size(path, ec);
    if (ec) throw FormatError(path + ": cannot determine the file size (" + ec.message() + ")");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw FormatError(path + ": cannot open for reading" +
                      (errno ? " (" + std::string(std::strerror(errno)) + ")" : std::string()));
  return in;
}

/// The whole of regular file `path`, refused (before anything is read) when it is larger than
/// `max_bytes`; `what` names the kind of file in that message ("config", "index").
inline std::string read_regular_file(const std::string& path, uint64_t max_bytes,
                                     const std::string& what) {
  uint64_t size = 0;
  std::ifstream in = open_regular_file(path, &size);
  if (size > max_bytes)
    throw FormatError(path + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_bytes) + "-byte limit for a " + what + " file");
  std::string text(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(&text[0], static_cast<std::streamsize>(size)))
    throw FormatError(path + ": could not read " + std::to_string(size) +
                      " bytes (was the file changed while it was read?)");
  return text;
}

/// The path of `name` inside model folder `dir`, with symbolic links resolved, refused when it
/// resolves to somewhere outside the (resolved) folder: a checkpoint must not make the loader
/// read, and quote, any file of the machine. The one exception is the Hugging Face hub's cache
/// layout, whose snapshot folders link into the repository's blobs/ folder. `name` is a plain file
/// name or a relative path. The file need not exist (the caller's open reports that).
inline std::string path_in_folder(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(fs::path(dir), ec);
  if (ec) throw FormatError(dir + ": cannot resolve the folder (" + ec.message() + ")");
  const fs::path given = fs::path(dir) / name;
  const fs::path target = fs::weakly_canonical(given, ec);
  if (ec) throw FormatError(given.string() + ": cannot resolve the path (" + ec.message() + ")");
  const auto inside = [&](const fs::path& root) {
    const fs::path relative = target.lexically_relative(root);
    const std::string first = relative.empty() ? std::string() : relative.begin()->string();
    return !(relative.empty() || first == ".." || first == "." || relative.is_absolute());
  };
  // A snapshot of the Hugging Face hub's cache (REPO/snapshots/REVISION/) links each file to
  // REPO/blobs/: that folder counts as part of the model, and nothing else outside it does.
  const bool hub_snapshot = folder.parent_path().filename() == "snapshots";
  const fs::path blobs = folder.parent_path().parent_path() / "blobs";
  if (!inside(folder) && !(hub_snapshot && inside(blobs)))
    throw FormatError(given.string() + ": resolves to " + excerpt(target.string(), 200) +
                      ", outside the model folder " + folder.string() +
                      ": expected every file of the model inside its folder");
  return given.string();
}

}  // namespace retnet
