"""What `crossmod serve` answers per second with five cultures of one run, beside the two ways to do without it: a
`crossmod predict` process started per request, and one server per culture (five processes, each request sent to all).

    python bench/serve.py [--smoke] [--repeats N]

The cultures are the synthetic concat-fusion run's five exports (trained here, as `make train` trains it; `--smoke`: two of them). Clients
send one meme per request (every culture answered) on keep-alive loopback connections, at concurrency 1, 8 and 64;
requests/s and p50/p99 latency per variant, the variants interleaved per round. Memory: the resident size of the
server's processes with five cultures against the five one-culture servers together. A soak sends 10,000 requests
(`--smoke`: 200) with 5 % malformed ones mixed in: every malformed one must be answered 422 naming its field, every
good one 200, the server alive, and its inference worker's memory flat.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import ROOT, Result, interleave, parser, repeats

from tests.serving.served import Served, as_memes

CULTURES = ("US", "DE", "MX", "IN", "CN")
CONCURRENCY = (1, 8, 64)


def exports(work: Path) -> tuple[list[Path], list[dict[str, Any]], Path]:
    """Train the small synthetic run, export every culture; the memes to send, and a JSONL file of one for predict."""
    env = {**os.environ, "CROSSMOD_RUN_ID": "bench", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    common = [f"paths.data_dir={work / 'data'}", f"paths.log_dir={work / 'runs'}"]
    train = [sys.executable, str(ROOT / "train.py"), "data.source.num_groups=40", "data.samples_per_shard=64", "debug=limit", "policy=cautious", "print_table=false", *common]
    subprocess.run(train, cwd=ROOT, env=env, check=True, capture_output=True, timeout=1800)
    run = work / "runs" / "synthetic_concat" / "runs" / "bench"
    subprocess.run([sys.executable, str(ROOT / "export.py"), f"run={run}", f"out={work / 'export'}"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=900)
    from crossmod.data.predict_inputs import read_inputs

    manifest = json.loads((run / "manifest.json").read_text())
    records = list(read_inputs(work / "data" / "shards" / f"{manifest['dataset']}-{manifest['fingerprint']}"))[:64]
    (work / "one.png").write_bytes(records[0]["image"])
    (work / "one.jsonl").write_text(json.dumps({"id": records[0]["id"], "text": records[0]["text"], "image": "one.png"}) + "\n")
    return [work / "export" / c for c in CULTURES], as_memes(records), work / "one.jsonl"


class Client:
    """One keep-alive connection per thread; `post` returns (status, body, seconds)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, body: bytes) -> tuple[int, bytes, float]:
        start = time.perf_counter()
        try:
            self.connection.request("POST", "/v1/classify", body, {"content-type": "application/json"})
            response = self.connection.getresponse()
            data = response.read()
        except (http.client.HTTPException, OSError):
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            raise
        return response.status, data, time.perf_counter() - start


def load(ports: list[int], bodies: list[bytes], concurrency: int, requests: int) -> dict[str, float]:
    """`requests` requests (each sent to every port at once: one answer per culture), `concurrency` at a time."""
    clients: dict[int, list[Client]] = {}

    def one(k: int) -> float:
        import threading

        mine = clients.setdefault(threading.get_ident(), [Client(port) for port in ports])
        body = bodies[k % len(bodies)]
        if len(mine) == 1:
            replies = [mine[0].post(body)]
        else:  # every server at once: one answer per culture
            with ThreadPoolExecutor(max_workers=len(mine)) as fan:
                replies = list(fan.map(lambda client: client.post(body), mine))
        if any(status != 200 for status, _, _ in replies):
            raise RuntimeError(f"a request failed: {[(s, b[:200]) for s, b, _ in replies if s != 200]}")
        return max(seconds for _, _, seconds in replies)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        latencies = sorted(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    return {"requests_per_s": requests / wall, "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def predict_per_request(folders: list[Path], jsonl: Path, work: Path, concurrency: int, requests: int) -> dict[str, float]:
    """`crossmod predict` started for each request (one meme, every culture), `concurrency` processes at a time."""
    adapters = f"adapters=[{','.join(map(str, folders))}]"

    def one(k: int) -> float:
        start = time.perf_counter()
        command = [sys.executable, "-m", "crossmod", "predict", adapters, f"inputs={jsonl}", f"out={work / f'predicted-{k}.jsonl'}"]
        subprocess.run(command, cwd=work, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        latencies = sorted(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    return {"requests_per_s": requests / wall, "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[-1]}


def resident_mib(pid: int) -> float:
    """Resident set of a process and its children (LitServe's HTTP, Manager and inference processes), in MiB."""
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def worker_mib(pid: int) -> float:
    """The inference worker's resident set (the process holding the models), in MiB."""
    import psutil

    workers = [p for p in psutil.Process(pid).children(recursive=True) if "multiprocessing.spawn" in " ".join(p.cmdline())]
    return sum(p.memory_info().rss for p in workers) / 2**20


def soak(server: Served, memes: list[dict[str, Any]], count: int) -> dict[str, Any]:
    """`count` requests, 5 % malformed (each kind of bad field in turn), 8 at a time: what came back for each."""
    rng = random.Random(0)
    bad_kinds = {
        "image": lambda m: {**m, "image": "%%% not base64"},
        "text": lambda m: {**m, "text": 17},
        "id": lambda m: {**m, "id": ["a", "list"]},
        "lang": lambda m: {**m, "lang": "x" * 40},
    }
    plan = [(k, rng.random() < 0.05) for k in range(count)]
    before = worker_mib(server.process.pid)
    counts = {"good_ok": 0, "good_failed": 0, "bad_named": 0, "bad_unnamed": 0}
    clients: dict[int, Client] = {}

    def one(item: tuple[int, bool]) -> str:
        import threading

        k, malformed = item
        client = clients.setdefault(threading.get_ident(), Client(server.port))
        meme = memes[k % len(memes)]
        field = None
        if malformed:
            field = list(bad_kinds)[k % len(bad_kinds)]
            meme = bad_kinds[field](meme)
        status, body, _ = client.post(json.dumps({"memes": [meme]}).encode())
        if not malformed:
            return "good_ok" if status == 200 else "good_failed"
        named = status == 422 and any(error["loc"][-1] == field for error in json.loads(body)["detail"])
        return "bad_named" if named else "bad_unnamed"

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        for outcome in pool.map(one, plan):
            counts[outcome] += 1
    after = worker_mib(server.process.pid)
    return {
        **counts,
        "requests": count,
        "malformed": sum(bad for _, bad in plan),
        "alive": server.process.poll() is None and server.get("/readyz")[0] == 200,
        "seconds": time.perf_counter() - start,
        "worker_mib_before": before,
        "worker_mib_after": after,
    }


def main() -> None:
    args = parser(__doc__.splitlines()[0], default_repeats=3).parse_args()
    requests = {1: 16, 8: 64, 64: 256} if not args.smoke else {1: 4, 8: 16, 64: 64}
    predict_requests = 2 if args.smoke else 8
    soak_count = 200 if args.smoke else 10_000
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        folders, memes, jsonl = exports(work)
        if args.smoke:  # two cultures: the same code paths, three servers to start instead of six
            folders = folders[:2]
        bodies = [json.dumps({"memes": [meme]}).encode() for meme in memes]
        settings = ("limits.max_queue=256", "batching.max_batch_size=16", "batching.batch_timeout_s=0.005", "log_requests=false", "threads=1")
        result = Result(
            "serve",
            "How many requests/s does crossmod serve answer with five cultures, beside predict per request and a server per culture?",
            args,
            {"cultures": [folder.name for folder in folders], "concurrency": list(CONCURRENCY), "requests": requests, "server": list(settings), "memes_per_request": 1},
        )
        shared = Served(folders, *settings, wait=False)
        separate = [Served([folder], *settings, wait=False) for folder in folders]  # six servers start at once
        for server in [shared, *separate]:
            server.ready()
        try:
            memory = {"served_mib": resident_mib(shared.process.pid), "separate_mib": sum(resident_mib(s.process.pid) for s in separate)}
            memory |= {"served_worker_mib": worker_mib(shared.process.pid), "separate_workers_mib": sum(worker_mib(s.process.pid) for s in separate)}
            for concurrency in CONCURRENCY:
                variants = {
                    f"served_c{concurrency}": lambda c=concurrency: load([shared.port], bodies, c, requests[c]),
                    f"per_culture_c{concurrency}": lambda c=concurrency: load([s.port for s in separate], bodies, c, requests[c]),
                }
                rounds = interleave(variants, repeats(args))
                for name, runs in rounds.items():
                    result.variant(name, "requests/s", [r["requests_per_s"] for r in runs], p50_ms=[r["p50_ms"] for r in runs], p99_ms=[r["p99_ms"] for r in runs])
                result.paired(
                    f"served_vs_per_culture_c{concurrency}",
                    [r["requests_per_s"] for r in rounds[f"served_c{concurrency}"]],
                    [r["requests_per_s"] for r in rounds[f"per_culture_c{concurrency}"]],
                    f"requests/s, one server with {len(folders)} cultures / {len(folders)} one-culture servers (each request to all), concurrency {concurrency}, same round",
                )
            for server in separate:
                server.stop()
            separate = []
            cores = os.cpu_count() or 1
            predicted = interleave(
                {
                    "predict_per_request": lambda: predict_per_request(folders, jsonl, work, cores, predict_requests),
                    "served_c64_again": lambda: load([shared.port], bodies, 64, requests[64]),
                },
                repeats(args),
            )
            result.variant("predict_per_request", "requests/s", [r["requests_per_s"] for r in predicted["predict_per_request"]], concurrency=cores)
            result.variant("served_c64_again", "requests/s", [r["requests_per_s"] for r in predicted["served_c64_again"]])
            vs_predict = result.paired(
                "served_vs_predict",
                [r["requests_per_s"] for r in predicted["served_c64_again"]],
                [r["requests_per_s"] for r in predicted["predict_per_request"]],
                f"requests/s, crossmod serve at concurrency 64 / crossmod predict started per request ({cores} at a time: one per core), same round",
            )
            soaked = soak(shared, memes, soak_count)
        finally:
            for server in [shared, *separate]:
                if server.process.poll() is None:
                    server.stop()
        vs_separate = result.payload["ratios"]["served_vs_per_culture_c64"]["value"]
        result.target("vs_predict", vs_predict, ">=", 4.0, "≥ 4× crossmod predict started per request (served at concurrency 64)", times=True)
        result.target("vs_per_culture", vs_separate, ">=", 2.0, f"≥ 2× one server per culture with {len(folders)} cultures (concurrency 64)", times=True)
        flat = soaked["worker_mib_after"] / soaked["worker_mib_before"]
        clean = soaked["good_failed"] == 0 and soaked["bad_unnamed"] == 0 and soaked["alive"]
        result.target("soak_clean", 1.0 if clean else 0.0, ">=", 1.0, "soak: every good request 200, every malformed one 422 naming its field, server alive")
        result.target("soak_memory", flat, "<=", 1.10, "soak: the inference worker's memory after / before ≤ 1.10", times=True)
        result.payload["memory"] = memory
        result.payload["soak"] = soaked
        for concurrency in CONCURRENCY:
            result.row(
                f"crossmod serve ({len(folders)} cultures) vs a server per culture, concurrency {concurrency}",
                f"served_c{concurrency}",
                f"per_culture_c{concurrency}",
                f"served_vs_per_culture_c{concurrency}",
                "vs_per_culture" if concurrency == 64 else None,
                unit="req/s",
            )
        result.row("crossmod serve at concurrency 64 vs crossmod predict per request", "served_c64_again", "predict_per_request", "served_vs_predict", "vs_predict", unit="req/s")
        p = result.payload["variants"]
        result.finding(
            f"One server answered {p['served_c64']['median']:.0f} requests/s at concurrency 64 (p50 {sorted(p['served_c64']['p50_ms'])[len(p['served_c64']['p50_ms']) // 2]:.0f} ms, "
            f"p99 {sorted(p['served_c64']['p99_ms'])[len(p['served_c64']['p99_ms']) // 2]:.0f} ms), every culture from one forward pass, while the {len(folders)} one-culture servers "
            f"were up beside it; those {len(folders)} together answered {p['per_culture_c64']['median']:.0f}. Alone on the machine it answered {p['served_c64_again']['median']:.0f} "
            f"requests/s, against {p['predict_per_request']['median']:.2f} for crossmod predict started per request ({vs_predict:.0f}×: a process start "
            f"and a model load per request). Memory: {memory['served_mib']:.0f} MiB for the {len(folders)} cultures' server against {memory['separate_mib']:.0f} MiB for {len(folders)} servers "
            f"(inference workers: {memory['served_worker_mib']:.0f} against {memory['separate_workers_mib']:.0f} MiB)."
        )
        result.finding(
            f"Soak: {soaked['requests']:,} requests, {soaked['malformed']} malformed, in {soaked['seconds']:.0f} s: {soaked['good_ok']:,} good answered 200 "
            f"({soaked['good_failed']} failed), {soaked['bad_named']} malformed answered 422 naming their field ({soaked['bad_unnamed']} not), the server "
            f"{'alive' if soaked['alive'] else 'DOWN'}; its inference worker held {soaked['worker_mib_before']:.0f} MiB before and {soaked['worker_mib_after']:.0f} MiB after."
        )
        result.write()


if __name__ == "__main__":
    main()
