// /v1/sessions: create a session (POST), describe one (GET /v1/sessions/ID) and delete one
// (DELETE /v1/sessions/ID), and the answer to each refusal of the session store. Completions use
// sessions through serve/routes_completions.hpp.
#pragma once

#include <optional>
#include <string>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/http.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

/// The answer to a refusal of the session store: 429 for too many sessions, 507 when the disk
/// quota or the file system has no room, 500 for a damaged file or any other failure.
inline ApiError session_refused_error(const SessionRefused& e) {
  using Why = SessionRefused::Why;
  switch (e.why()) {
    case Why::kTooMany:
      return ApiError(429, e.what(), "", "session_limit");
    case Why::kDiskQuota:
      return ApiError(507, e.what(), "", "session_disk_quota");
    case Why::kFolderFull:
      return ApiError(507, e.what(), "", "session_folder_full");
    case Why::kDamaged:
      return ApiError(500, e.what(), "", "session_damaged");
    case Why::kUnreadable:
      return ApiError(500, e.what(), "", "session_unreadable");
    case Why::kConflict:
      return ApiError(409, e.what(), "", "session_conflict");
    case Why::kUnavailable:
      return ApiError(503, e.what(), "", "session_store_unavailable");
    case Why::kNotSaved:
      break;
  }
  return ApiError(500, e.what(), "", "session_not_saved");
}

class SessionsRoutes {
 public:
  explicit SessionsRoutes(const ServerContext& context) : ctx_(context) {}

  /// POST /v1/sessions
  void create(const http::Request& req, http::Response& res) const {
    std::string id = parse_new_session(req.body());
    SessionStore::Result created;
    try {
      created = ctx_.sessions.create(id);
    } catch (const SessionRefused& e) {
      throw session_refused_error(e);
    }
    if (created == SessionStore::Result::kExists)
      throw ApiError(409, "session '" + id + "' already exists", "id", "session_exists");
    reply(res, 201, session_info_json(id, SessionStore::Info{0, 0, true, false}));
  }

  /// GET /v1/sessions/ID
  void get(const http::Request& req, http::Response& res) const {
    const std::string id = session_id(req);
    std::optional<SessionStore::Info> info;
    try {
      info = ctx_.sessions.info(id);
    } catch (const SessionRefused& e) {
      throw session_refused_error(e);
    }
    if (!info)
      throw ApiError(404, "session '" + id + "' does not exist", "id", "session_not_found");
    reply(res, 200, session_info_json(id, *info));
  }

  /// DELETE /v1/sessions/ID
  void remove(const http::Request& req, http::Response& res) const {
    const std::string id = session_id(req);
    const auto r = ctx_.sessions.remove(id);
    if (r != SessionStore::Result::kOk) throw session_error(r, id, "id");
    reply(res, 200, {{"id", id}, {"object", "session"}, {"deleted", true}});
  }

 private:
  /// The ID in the path, checked before it comes near the session folder.
  static std::string session_id(const http::Request& req) {
    const std::string id = req.param(1);
    if (!valid_session_id(id))
      throw ApiError(400, "session ids match [A-Za-z0-9_-]{1,64}", "id", "invalid_session_id");
    return id;
  }

  const ServerContext& ctx_;
};

}  // namespace retnet::serve
