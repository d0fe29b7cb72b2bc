"""``python -m bench.fashion_search``: the Fashion-MNIST search, ten ways, over seeds, and its
report ``docs/fashion-search.md`` (``bench/fashion_search``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fashion_search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    parser.add_argument("--trials", type=int, default=30, help="trials per search (default 30)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of a full training (default 4)")
    parser.add_argument("--jobs", type=int, default=2, help="seeds run at once (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fashion_search")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "fashion-search.md")
    parser.add_argument(
        "--note", default=None, help="a paragraph for the top of the report (kept beside the cache for later runs)"
    )
    parser.add_argument("--report-only", action="store_true", help="report the seeds already run")
    parser.add_argument(
        "--keep-older-engines",
        action="store_true",
        help="keep seeds an earlier engine ran instead of rerunning them (the report names each engine)",
    )
    args = parser.parse_args(argv)
    from nas.fashion_mnist import FashionMNISTMissing, find_dir

    try:
        find_dir()  # before any work: a missing dataset is one line saying how to get it
    except FashionMNISTMissing as missing:
        print(f"python -m bench.fashion_search: {missing}", file=sys.stderr)
        return 7  # as `preflight demo` (EXIT_MISSING_DATA)
    from bench.fashion_search.run import run, seed_results

    seeds = list(range(args.seeds))
    # a report of cached seeds reads them whatever engine ran them (the report names it); a run
    # reruns those of an older engine unless told to keep them
    any_engine = args.report_only or args.keep_older_engines
    if not args.report_only:
        run(args.out, seeds, args.trials, args.epochs, args.jobs, any_engine)
    done = seed_results(args.out, seeds, args.trials, args.epochs, any_engine=any_engine)
    from bench.fashion_search.peers import read_peers, train_peers
    from bench.fashion_search.report import write_report
    from bench.fashion_search.run import config
    from bench.pipeline.run import kept_note, write_json

    peers_path = args.out / "peers.json"
    # the peers (LSUV and the spec's init on the start-up networks) do not depend on the engine;
    # the key names the engines that chose those networks
    engines = sorted({data["config"]["engine"] for data in done.values()}) or [config(1, 1)["engine"]]
    engine = engines[0] if len(engines) == 1 else engines
    key = {"config": config(args.trials, args.epochs) | {"engine": engine}, "seeds": sorted(done)}
    if not args.report_only and done:
        write_json(peers_path, key | {"rows": train_peers(args.out, done, args.epochs, args.jobs)})
    peers = read_peers(peers_path, key)
    args.note = kept_note(args.out / "note.md", args.note)
    for path in write_report(done, args, ROOT, peers):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
