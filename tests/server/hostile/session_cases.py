"""Cases of the session store (causes 6, 7, 8, 14, 15): a save that fails (a folder that cannot
be written, a full folder) leaves the session where it was and no temporary file; quotas refuse
with 429 / 507 rather than push another client's session out; a start-up that would keep no
session is refused; a damaged session file is refused, named, and kept.

The tests may run as root, whom chmod does not stop: a folder "that cannot be written" is then
a file put in the folder's place. A full folder is a file-size limit (RLIMIT_FSIZE) on the
server: its writes beyond it fail with EFBIG as on a full disk (the server ignores SIGXFSZ);
where a tmpfs can be mounted (root), also a folder on a 512 KB tmpfs (ENOSPC).
"""
import contextlib
import json
import os
import resource
import subprocess

from harness import Case

GREEDY = dict(temperature=0, seed=1)


def create(srv, sid):
    status, _, body = srv.request("POST", "/v1/sessions", {"id": sid})
    assert status == 201, f"creating session {sid} got {status}: {body[:300]!r}"


def tokens_of(srv, sid):
    status, _, body = srv.request("GET", "/v1/sessions/" + sid)
    assert status == 200, f"GET session {sid} got {status}: {body[:300]!r}"
    return json.loads(body)["tokens"]


def error_of(body):
    return body.get("error", {}) if isinstance(body, dict) else {}


def temporary_files(folder):
    return [p.name for p in folder.iterdir() if ".tmp" in p.name] if folder.is_dir() else []


@contextlib.contextmanager
def unwritable(folder):
    """The folder cannot be written inside the block: read-only for a user, a file in its place
    for root (whom permissions do not stop)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
    else:
        away = folder.with_name(folder.name + ".away")
        folder.rename(away)
        folder.write_text("not a folder")
        try:
            yield
        finally:
            folder.unlink()
            away.rename(folder)


def streamed_error(srv, sid):
    """The error event of a streamed completion in session `sid` (None when there is none)."""
    status, _, body = srv.request("POST", "/v1/completions",
                                  dict(prompt=" more", max_tokens=3, session=sid, stream=True,
                                       **GREEDY), timeout=30)
    assert status == 200, f"a streamed request got {status}"
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("data: {") and '"error"' in line:
            return json.loads(line[6:])["error"]
    return None


def failed_save_keeps_session(h):
    folder = h.tmp / "sessions"
    srv = h.start(sessions_dir=folder)
    for sid in ("a", "twin"):
        create(srv, sid)
        status, body = srv.completion("ROMEO:", 5, session=sid, **GREEDY)
        assert status == 200, f"the first request in {sid} got {status}: {body}"
    saved = tokens_of(srv, "a")
    with unwritable(folder):
        status, body = srv.completion(" and", 5, session="a", **GREEDY)
        message = error_of(body).get("message", "")
        assert tokens_of(srv, "a") == saved, "the session moved although its save failed"
        assert status == 500, f"a request whose save failed got {status}: {body}"
        assert "session 'a' not saved" in message, f"the message does not say so: {message}"
        event = streamed_error(srv, "a")
        assert event and "not saved" in event.get("message", ""), f"streamed: {event}"
        assert tokens_of(srv, "a") == saved, "the session moved after a streamed failed save"
        assert srv.alive()
    # The next request continues from the last saved state: as its twin, which never failed.
    got = [srv.completion(" and", 8, session=sid, **GREEDY) for sid in ("a", "twin")]
    assert got[0][0] == 200 and got[1][0] == 200, f"continuing got {got}"
    assert got[0][1]["choices"][0]["text"] == got[1][1]["choices"][0]["text"], \
        "the session did not continue from its last saved state"
    assert got[0][1]["session"]["tokens"] == got[1][1]["session"]["tokens"]
    srv.normal_ok()


def full_folder(h):
    folder = h.tmp / "sessions"
    limit = 64 * 1024  # a session file of the demo model is about 0.37 MB

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    srv = h.start(sessions_dir=folder, preexec_fn=small_files)
    create(srv, "a")  # an empty session's file is 9 bytes
    for attempt in range(5):
        status, body = srv.completion("ROMEO:", 4, session="a", **GREEDY)
        assert srv.alive(), "the server died on a write beyond its file-size limit: " + \
            srv.log()[-500:]
        message = error_of(body).get("message", "")
        assert status == 507, f"a save into a full folder got {status}: {body}"
        assert "session 'a' not saved" in message, f"the message does not say so: {message}"
    assert tokens_of(srv, "a") == 0, "the session moved although its saves failed"
    left = temporary_files(folder)
    assert not left, f"temporary files left: {left}"
    srv.normal_ok()
    srv.stop()
    with small_tmpfs(h.tmp / "tmpfs", "512k") as mounted:
        if mounted:
            full_tmpfs(h, mounted)
        else:
            print("     (no tmpfs can be mounted here: the file-size limit stands for a full disk)")


@contextlib.contextmanager
def small_tmpfs(path, size):
    """A tmpfs of `size` at `path` when this machine lets us mount one (root, a container that
    allows it), else None."""
    path.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", str(path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    try:
        yield path if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=False)


def full_tmpfs(h, folder):
    """A folder on a 512 KB tmpfs: the second session's save finds no space (ENOSPC)."""
    srv = h.start(sessions_dir=folder)
    create(srv, "a")
    create(srv, "b")
    assert srv.completion("ROMEO:", 4, session="a", **GREEDY)[0] == 200
    status, body = srv.completion("ROMEO:", 4, session="b", **GREEDY)
    message = error_of(body).get("message", "")
    assert status == 507 and "session 'b' not saved" in message, \
        f"a save into a full tmpfs got {status}: {body}"
    assert tokens_of(srv, "b") == 0, "the session moved although its save failed"
    left = temporary_files(folder)
    assert not left, f"temporary files left on the full tmpfs: {left}"
    srv.normal_ok()
    srv.stop()


def quotas(h):
    # --sessions-max: the 4th session is refused; the 3 first stay.
    srv = h.start(["--sessions-max", "3"], sessions_dir=h.tmp / "count")
    for sid in ("a", "b", "c"):
        create(srv, sid)
    status, _, body = srv.request("POST", "/v1/sessions", {"id": "d"})
    assert status == 429 and b"--sessions-max" in body, f"a 4th session got {status}: {body!r}"
    for sid in ("a", "b", "c"):
        assert tokens_of(srv, sid) == 0
    srv.normal_ok()
    # --sessions-disk: the save that would pass 1 MB is refused; the saved sessions stay.
    srv = h.start(["--sessions-disk", "1"], sessions_dir=h.tmp / "disk")
    saved, refused = [], None
    for sid in ("a", "b", "c", "d", "e"):
        create(srv, sid)
        status, body = srv.completion("ROMEO:", 3, session=sid, **GREEDY)
        if status == 507:
            refused = (sid, error_of(body).get("message", ""))
            break
        assert status == 200, f"a save within the quota got {status}: {body}"
        saved.append(sid)
    assert refused, "5 sessions of 0.37 MB were saved within --sessions-disk 1"
    assert "--sessions-disk" in refused[1], f"the message does not name the flag: {refused[1]}"
    assert saved and tokens_of(srv, refused[0]) == 0
    for sid in saved:
        status, body = srv.completion(" and", 2, session=sid, **GREEDY)
        assert status == 200, f"a saved session {sid} got {status}: {body}"
    srv.normal_ok()
    # Without a folder: memory holds 2 sessions of the demo model; a 3rd is refused, and the
    # 2 first are never pushed out.
    srv = h.start(["--sessions-memory", "1"])
    for sid in ("a", "b"):
        create(srv, sid)
        assert srv.completion("ROMEO:", 3, session=sid, **GREEDY)[0] == 200
    status, _, body = srv.request("POST", "/v1/sessions", {"id": "c"})
    assert status == 429 and b"--sessions-memory" in body, f"a 3rd session got {status}: {body!r}"
    for sid in ("a", "b"):
        assert tokens_of(srv, sid) > 0, f"session {sid} was pushed out"
    srv.normal_ok()


def no_session_memory(h):
    args = [str(h.cli), "serve", "-m", str(h.model), "--host", "127.0.0.1", "--port", "0",
            "--sessions-memory", "0"]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("--sessions-memory 0 without --sessions-dir started a server")
    lines = err.strip().splitlines()
    assert proc.returncode == 2, f"exit status {proc.returncode}: {err}"
    assert len(lines) == 1 and "--sessions-memory 0" in lines[0], f"not one line naming it: {err}"
    h.default.normal_ok()


def damaged_file(h):
    folder = h.tmp / "sessions"
    srv = h.start(sessions_dir=folder)
    for sid in ("flipped", "cut"):
        create(srv, sid)
        assert srv.completion("ROMEO:", 4, session=sid, **GREEDY)[0] == 200
    srv.stop()
    flipped = folder / "flipped.session"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x10
    flipped.write_bytes(bytes(data))
    cut = folder / "cut.session"
    cut.write_bytes(cut.read_bytes()[:-100])
    srv = h.start(sessions_dir=folder)
    for sid, path in (("flipped", flipped), ("cut", cut)):
        before = path.read_bytes()
        status, body = srv.completion(" and", 2, session=sid, **GREEDY)
        message = error_of(body).get("message", "")
        assert status == 500 and f"session '{sid}' is damaged" in message, \
            f"continuing a damaged session got {status}: {body}"
        status, _, raw = srv.request("GET", "/v1/sessions/" + sid)
        assert status == 500 and b"damaged" in raw, f"GET of a damaged session got {status}"
        assert path.read_bytes() == before, "the damaged file was changed or removed"
        status, _, _ = srv.request("DELETE", "/v1/sessions/" + sid)
        assert status == 200, f"deleting a damaged session got {status}"
        create(srv, sid)
    assert srv.alive()
    srv.normal_ok()


CASES = [
    Case("6", "a failed save (folder not writable) leaves the session where it was",
         failed_save_keeps_session),
    Case("7", "a full folder is 507, the server lives, no temporary file is left", full_folder),
    Case("8", "--sessions-max 429, --sessions-disk 507, memory-only 429: nothing pushed out",
         quotas),
    Case("14", "--sessions-memory 0 without --sessions-dir is refused at start-up",
         no_session_memory),
    Case("15", "a damaged session file is refused as damaged, named, and kept", damaged_file),
]
