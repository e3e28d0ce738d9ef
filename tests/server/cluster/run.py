#!/usr/bin/env python3
"""Replicas of `retnet serve` sharing their sessions in Redis, behind HAProxy (ctest
"ServerCluster"; docs/SCALING.md). Every reply is compared with a single server
(one `retnet serve`, sessions in its memory) given the same requests, greedy:

  A  a session created on replica A and continued on B gives the single server's text
  B  through HAProxy, 3 replicas, 24 conversations x 5 turns, round robin
  C  during turn 3 one replica is killed (SIGKILL): its in-flight requests fail, all others
     complete, and every conversation continues from its last committed turn
  D  one session on two replicas at once: one 200, one 409, the history advanced once
  E  Redis stopped: 503 session_store_unavailable, the replica alive; Redis back: success;
     Redis killed and restarted from its append-only file: every session intact
  F  --session-precision bf16: a conversation continues; its drift against f32 is printed
     (bytes and tokens are one to one for the demo model's byte tokenizer)

Usage: run.py RETNET_CLI MODEL_DIR [-k LETTER ...]
Exits 77 (skipped) when redis-server or haproxy is not installed.
"""
import argparse
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import HAProxy, Redis, Replica, env_has, free_port, parallel, wait_until  # noqa: E402

CONVERSATIONS = 24
TURNS = 6  # 5 through the proxy, the 6th after Redis's restart
LEASE_S = 2
NAMES = ["ROMEO", "JULIET", "HAMLET", "KING LEAR", "PORTIA", "OTHELLO", "MACBETH", "VIOLA",
         "PROSPERO", "MIRANDA", "BRUTUS", "CLEOPATRA", "FALSTAFF"]


def turn_request(conv, turn, sid):
    """Conversation `conv`'s request number `turn` (0-based), greedy. Turn 2 is long, so that
    the replica killed during it has requests in flight."""
    name = NAMES[(conv * 5 + turn) % len(NAMES)]
    prompt = f"{name}:" if turn == 0 else f"\n{name}:"
    max_tokens = 300 if turn == 2 else 4 + (conv + turn) % 5
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "session": sid,
            "stream": conv % 2 == 1}


def sid_of(conv):
    return f"conv-{conv}"


class Cluster:
    def __init__(self, cli, model, work):
        self.cli, self.model, self.work = cli, model, work
        self.redis = Redis(work / "redis", free_port(), work / "redis.log")
        self.replicas = []
        self.proxy = None
        self.ref = None  # texts[conv][turn], tokens[conv][turn] of the single server
        self._count = 0
        self.others = []

    def replica(self, extra=(), db=0):
        self._count += 1
        r = Replica(self.cli, self.model,
                    ["--sessions", self.redis.url(db), "--session-lease", str(LEASE_S)] +
                    list(extra), self.work / f"replica{self._count}.log")
        self.others.append(r)
        return r

    def close(self):
        if self.proxy:
            self.proxy.stop()
        for r in self.others:
            r.stop()
        self.redis.stop()


def single_server_run(c):
    """Every conversation on one server with its sessions in memory: the reference."""
    srv = Replica(c.cli, c.model, [], c.work / "single.log")
    texts = [[None] * TURNS for _ in range(CONVERSATIONS)]
    tokens = [[None] * TURNS for _ in range(CONVERSATIONS)]
    try:
        for conv in range(CONVERSATIONS):
            status, body = srv.create_session(sid_of(conv))
            assert status == 201, f"single server: {status} {body}"

        def conversation(conv):
            def run():
                for turn in range(TURNS):
                    a = srv.complete(turn_request(conv, turn, sid_of(conv)))
                    assert a.ok, f"single server, conversation {conv} turn {turn + 1}: {a}"
                    texts[conv][turn], tokens[conv][turn] = a.text, a.tokens
            return run
        parallel([conversation(conv) for conv in range(CONVERSATIONS)])
        assert all(t is not None for row in texts for t in row), "a single-server turn failed"
    finally:
        srv.stop()
    c.ref = (texts, tokens)


def expect_turn(c, conv, turn, a, where):
    texts, tokens = c.ref
    assert a.ok, f"{where}: conversation {conv} turn {turn + 1} failed: {a}"
    assert a.text == texts[conv][turn], (
        f"{where}: conversation {conv} turn {turn + 1}: {a.text!r} != the single server's "
        f"{texts[conv][turn]!r}")
    if a.tokens is not None:
        assert a.tokens == tokens[conv][turn], (
            f"{where}: conversation {conv} turn {turn + 1}: session at {a.tokens} tokens, the "
            f"single server's at {tokens[conv][turn]}")


def case_a_across_replicas(c):
    """Two conversations, one greedy and one sampled with a seed per turn, alternating between
    replicas A and B, against a single server."""
    a, b = c.replicas[0], c.replicas[1]
    single = Replica(c.cli, c.model, [], c.work / "single-across.log")

    def request(conv, turn):
        req = turn_request(conv, turn, f"across-{conv}")
        if conv == 1:
            req.update(temperature=0.8, seed=100 + turn)
        return req
    try:
        for conv in range(2):
            assert a.create_session(f"across-{conv}")[0] == 201
            assert single.create_session(f"across-{conv}")[0] == 201
            for turn in range(TURNS):
                got = (a, b)[turn % 2].complete(request(conv, turn))
                want = single.complete(request(conv, turn))
                assert got.ok and want.ok, (got, want)
                assert (got.text, got.tokens) == (want.text, want.tokens), (
                    f"conversation {conv} turn {turn + 1} on replica {'AB'[turn % 2]}: "
                    f"{got.text!r} ({got.tokens} tokens) != the single server's {want.text!r} "
                    f"({want.tokens})")
    finally:
        single.stop()
    print(f"     {TURNS} turns alternating between two replicas, greedy and sampled with seeds, "
          f"equal the single server's")


def run_turn(c, turn, on_open=None):
    return parallel([
        (lambda conv=conv: c.proxy.complete(turn_request(conv, turn, sid_of(conv)),
                                            on_open=on_open))
        for conv in range(CONVERSATIONS)])


def case_b_round_robin(c):
    for conv in range(CONVERSATIONS):
        status, body = c.proxy.create_session(sid_of(conv))
        assert status == 201, f"POST /v1/sessions through HAProxy: {status} {body}"
    served = {}
    for turn in range(2):
        for conv, a in enumerate(run_turn(c, turn)):
            expect_turn(c, conv, turn, a, "through HAProxy")
            served[a.served_by] = served.get(a.served_by, 0) + 1
    print(f"     turns 1-2 of {CONVERSATIONS} conversations equal the single server's; "
          f"answered by {dict(sorted(served.items()))}")
    assert len(served) == 3, f"round robin should use all 3 replicas: {served}"


def case_c_replica_killed(c):
    texts, tokens = c.ref
    opened, lock = [], threading.Lock()

    def on_open(by):
        with lock:
            opened.append(by)
    victim_name = []

    def killer():
        # At the first event of the first stream: that stream has most of its 300 tokens to go
        # (waiting for every stream could let a fast replica finish its requests first).
        wait_until("a stream of turn 3 started", lambda: len(opened) >= 1, 30)
        victim_name.append(opened[0])
        c.proxy.names[opened[0]].kill9()
    t0 = time.time()
    answers = parallel([lambda: run_turn(c, 2, on_open), killer])[0]
    victim = victim_name[0]
    failed = [conv for conv, a in enumerate(answers) if not a.ok]
    for conv, a in enumerate(answers):
        if a.ok:
            expect_turn(c, conv, 2, a, "turn 3")
        else:
            assert a.served_by in (victim, None), (
                f"conversation {conv} failed on {a.served_by}, not on the killed {victim}: {a}")
    cut = sum(1 for a in answers if not a.ok and a.status == 200)
    proxy_status = sorted({a.status for a in answers if not a.ok and a.status != 200})
    print(f"     killed {victim} during turn 3: {len(failed)} requests failed ({cut} streams cut "
          f"short, {len(failed) - cut} answered {proxy_status} by HAProxy), "
          f"{CONVERSATIONS - len(failed)} completed as the single server's")
    assert failed, f"no request failed although {victim} was killed mid-stream"
    # The proxy takes the killed replica out of the rotation (its health checks).
    c.proxy.wait_all_healthy(6)
    # A session whose request died is at its last committed turn; the next turn continues it
    # once the dead replica's lease has expired (until then: 409 session_busy).
    rerun = 0
    for conv in failed:
        at = c.proxy.session_tokens(sid_of(conv))
        assert at in (tokens[conv][1], tokens[conv][2]), (
            f"conversation {conv}: session at {at} tokens, neither turn 2's "
            f"({tokens[conv][1]}) nor turn 3's ({tokens[conv][2]})")
        if at == tokens[conv][1]:
            rerun += 1
            deadline = time.time() + LEASE_S + 10
            while True:
                a = c.proxy.complete(turn_request(conv, 2, sid_of(conv)))
                if a.code != "session_busy" or time.time() > deadline:
                    break
                time.sleep(0.2)
            expect_turn(c, conv, 2, a, "turn 3 again")
    for turn in (3, 4):
        for conv, a in enumerate(run_turn(c, turn)):
            expect_turn(c, conv, turn, a, "after the kill")
    print(f"     {rerun} sessions stayed at turn 2 and continued from there, "
          f"{len(failed) - rerun} had committed turn 3; turns 4-5 of all {CONVERSATIONS} equal "
          f"the single server's ({time.time() - t0:.1f} s)")


def case_d_two_replicas_one_session(c):
    a, b = [r for r in c.replicas if r.alive()][:2]
    sid = "both-0"
    assert a.create_session(sid)[0] == 201
    expect_turn(c, 0, 0, a.complete(turn_request(0, 0, sid)), "replica A")
    before = a.session_tokens(sid)
    started = threading.Event()
    long_req = dict(turn_request(0, 2, sid), stream=True)
    first, second = parallel([
        lambda: a.complete(long_req, on_open=lambda by: started.set()),
        lambda: (started.wait(30), b.complete(turn_request(0, 1, sid)))[1]])
    assert first.ok, f"the first request: {first}"
    assert second.status == 409 and second.code == "session_busy", (
        f"the second replica should answer 409 session_busy: {second}")
    after = b.session_tokens(sid)
    assert after == first.tokens, f"session at {after} tokens, the 200 said {first.tokens}"
    # Advanced once: by the long request's prompt and tokens, as on the single server after
    # turn 1 (its tokens) plus that request alone.
    single = Replica(c.cli, c.model, [], c.work / "single-both.log")
    try:
        single.create_session(sid)
        single.complete(turn_request(0, 0, sid))
        alone = single.complete(long_req)
    finally:
        single.stop()
    assert first.text == alone.text and after == alone.tokens, (
        f"the history should have advanced once: {before} -> {after} tokens, the single "
        f"server {alone.tokens}")
    print(f"     200 on A, 409 session_busy on B; session {before} -> {after} tokens, once")


def case_e_redis_away(c):
    texts, tokens = c.ref
    r = [x for x in c.replicas if x.alive()][0]
    sid = "away-0"
    assert r.create_session(sid)[0] == 201
    expect_turn(c, 0, 0, r.complete(turn_request(0, 0, sid)), "before Redis stops")
    c.redis.stop()
    a = r.complete(turn_request(0, 1, sid))
    assert a.status == 503 and a.code == "session_store_unavailable", (
        f"a session's request with Redis away: {a}")
    status, body = r.create_session("away-1")
    assert status == 503 and body["error"]["code"] == "session_store_unavailable", (
        f"POST /v1/sessions with Redis away: {status} {body}")
    assert r.alive() and r.request("GET", "/health")[0] == 200, "the replica died with Redis"
    plain = r.complete({"prompt": "ROMEO:", "max_tokens": 4, "temperature": 0})
    assert plain.ok, f"a request without a session with Redis away: {plain}"
    print(f"     Redis away: 503 session_store_unavailable ({a.error[:70]}...); the replica "
          f"alive, serving requests without a session")
    c.redis = Redis(c.redis.data_dir, c.redis.port, c.work / "redis2.log")
    expect_turn(c, 0, 1, r.complete(turn_request(0, 1, sid)), "after Redis restarted")
    print("     Redis back: the session continues from its last committed turn")
    # Killed outright, restarted from its append-only file: every session as it was.
    before = {conv: r.session_tokens(sid_of(conv)) for conv in range(CONVERSATIONS)}
    assert before == {conv: tokens[conv][4] for conv in range(CONVERSATIONS)}, before
    c.redis.kill9()
    c.redis = Redis(c.redis.data_dir, c.redis.port, c.work / "redis3.log")
    fresh = c.replica()  # nothing cached: every state is read from Redis
    after = {conv: fresh.session_tokens(sid_of(conv)) for conv in range(CONVERSATIONS)}
    assert after == before, f"token counts changed across Redis's restart: {before} -> {after}"
    answers = parallel([(lambda conv=conv: fresh.complete(turn_request(conv, 5, sid_of(conv))))
                        for conv in range(CONVERSATIONS)])
    for conv, a in enumerate(answers):
        expect_turn(c, conv, 5, a, "after Redis's restart from its append-only file")
    print(f"     Redis killed (SIGKILL) and restarted from its append-only file: "
          f"{CONVERSATIONS} sessions intact, their next turns equal the single server's")


def case_f_bf16(c):
    """Four turns, each continued on the other replica (so read back from Redis), with the
    sessions stored as f32 and as bf16: the bf16 conversation continues, and its drift from the
    f32 one (the first token that differs) is printed."""
    prompts = ["JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?", "\nROMEO:", "\nJULIET:",
               "\nNURSE:"]
    n = 96
    text = {}
    for precision, db in (("f32", 1), ("bf16", 2)):
        pair = [c.replica(["--session-precision", precision], db=db) for _ in range(2)]
        sid = f"precision-{precision}"
        assert pair[0].create_session(sid)[0] == 201
        answers = []
        for turn, prompt in enumerate(prompts):
            a = pair[turn % 2].complete({"session": sid, "prompt": prompt, "max_tokens": n,
                                         "temperature": 0})
            assert a.ok, f"{precision} turn {turn + 1}: {a}"
            answers.append(a)
        text[precision] = answers
        for r in pair:
            r.stop()
    for turn, (x, y) in enumerate(zip(text["f32"], text["bf16"])):
        assert x.tokens == y.tokens, f"turn {turn + 1}: {x.tokens} != {y.tokens} tokens"
        if x.text != y.text:
            first = next((i for i, (p, q) in enumerate(zip(x.text, y.text)) if p != q),
                         min(len(x.text), len(y.text)))
            print(f"     bf16 sessions: turn {turn + 1} differs from f32 at token {first} of {n}: "
                  f"{y.text[first:first + 20]!r} instead of {x.text[first:first + 20]!r}")
            return
    print(f"     bf16 sessions: {len(prompts)} turns x {n} greedy tokens, each continued on the "
          f"other replica, equal f32's token for token")


CASES = [("A", "a session created on one replica continues on another", case_a_across_replicas),
         ("B", "HAProxy, 3 replicas, 24 conversations, round robin", case_b_round_robin),
         ("C", "a replica killed during turn 3", case_c_replica_killed),
         ("D", "one session on two replicas at once", case_d_two_replicas_one_session),
         ("E", "Redis stopped, restarted, restarted from its append-only file",
          case_e_redis_away),
         ("F", "--session-precision bf16 against f32", case_f_bf16)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("model")
    ap.add_argument("-k", action="append", default=[], help="run only these cases (letters)")
    args = ap.parse_args()
    missing = [p for p in ("redis-server", "haproxy") if not env_has(p)]
    if missing:
        print(f"SKIP: {' and '.join(missing)} not installed (Debian: apt-get install "
              f"redis-server haproxy)")
        sys.exit(77)
    work = Path(tempfile.mkdtemp(prefix="retnet-cluster-"))
    t_all = time.time()
    failed = []
    c = Cluster(Path(args.cli), Path(args.model), work)
    try:
        t0 = time.time()
        single_server_run(c)
        print(f"ok      single-server run of {CONVERSATIONS} conversations x {TURNS} turns "
              f"({time.time() - t0:.1f} s)", flush=True)
        c.replicas = [c.replica() for _ in range(3)]
        c.proxy = HAProxy(c.replicas, work)
        for letter, title, fn in CASES:
            if args.k and letter not in args.k:
                continue
            t0 = time.time()
            try:
                fn(c)
                print(f"ok   {letter}  {title} ({time.time() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the next
                failed.append(letter)
                print(f"FAIL {letter}  {title}: {e}", flush=True)
                if not isinstance(e, AssertionError):
                    traceback.print_exc()
    finally:
        c.close()
    ran = sum(1 for letter, _, _ in CASES if not args.k or letter in args.k)
    print(f"{ran} cases, {len(failed)} failed, in "
          f"{time.time() - t_all:.0f} s")
    if failed:
        print(f"FAILED cases: {' '.join(failed)}; logs kept in {work}")
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
