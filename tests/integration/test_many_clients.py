"""100 clients connected at once each get their status; the daemon keeps
serving afterwards and forgets the clients that left."""
import os
import time
import select
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

N = 100


def main(t):
    d = t.start_daemon()
    nobody_uid, _ = jt.nobody_ids()

    with t.case("%d concurrent clients each get a status response" % N):
        clients = []
        for i in range(N):
            # Every fourth client is nobody: unprivileged peers may ask for status.
            clients.append(d.client(user="nobody" if i % 4 == 3 else None))
        jt.log("%d clients connected" % N)
        ids = [c.send("status") for c in clients]
        answers = {}
        deadline = time.monotonic() + 30
        while len(answers) < N and time.monotonic() < deadline:
            waiting = [c for i, c in enumerate(clients) if i not in answers]
            r, _, _ = select.select([c.sock for c in waiting], [], [], 1.0)
            for i, c in enumerate(clients):
                if i in answers or c.sock not in r:
                    continue
                m = c.recv_for(ids[i], 10)
                jt.check(m is not None, "client %d: connection closed without a response" % i)
                answers[i] = m
        missing = [i for i in range(N) if i not in answers]
        jt.check(not missing, "no status response within 30 s for %d client(s): %s"
                 % (len(missing), missing[:20]))
        for i, m in answers.items():
            jt.check(m.get("ok") is True and m.get("type") == "status",
                     "client %d: bad status response %r" % (i, m))
            peer = m["status"].get("peer")
            jt.check(isinstance(peer, dict), "client %d: status.peer is %r" % (i, peer))
            want_uid = nobody_uid if i % 4 == 3 else 0
            jt.check(peer.get("uid") == want_uid, "client %d: status.peer.uid should be %d: %r"
                     % (i, want_uid, peer))
        # All N were connected when the last answers were written.
        counts = [m["status"].get("clients") for m in answers.values()]
        jt.check(all(isinstance(n, int) for n in counts), "status.clients not an int: %r"
                 % counts[:5])
        jt.check(max(counts) >= N, "status.clients never reached %d: max %d" % (N, max(counts)))

        for c in clients:
            c.close()

    with t.case("daemon still serves and the clients are gone"):
        c = d.client()
        jt.wait_until(lambda: c.status()["clients"] == 1, 5, 0.2,
                      "status.clients to drop back to 1 (this client)")
        r = c.request("hello", min_version=1, max_version=1)
        jt.check(r.get("ok") is True and r.get("type") == "hello", "hello: %r" % r)
        c.close()


jt.run(main)
