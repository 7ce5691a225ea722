"""uatlab sweep end to end: one process, two MPI ranks (the same results), resume, bad configs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = sys.argv[1]


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def results(folder):
    out = {}
    with open(os.path.join(folder, "runs.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            j["result"].pop("seconds")
            out[json.dumps(j["cell"], sort_keys=True)] = j["result"]
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="uatlab-sweep-")
    try:
        one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
        r = run([BIN, "sweep", "small", "--out-dir", one])
        assert r.returncode == 0, r.stderr
        assert "smallest memorizing parameters" in r.stdout, r.stdout
        for name in ["runs.jsonl", "summary.csv", "accuracy_heatmap.png", "config.json"]:
            assert os.path.getsize(os.path.join(one, name)) > 0, name
        first = results(one)
        assert len(first) == 4, first

        # A rerun resumes: nothing is trained again.
        r = run([BIN, "sweep", "small", "--out-dir", one])
        assert r.returncode == 0 and "accuracy" not in r.stderr.split("results appended")[1], r.stderr
        assert results(one) == first

        # Two MPI ranks take disjoint shards; rank 0 writes every result, and they are the same.
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
        r = run(["mpirun", "-n", "2", BIN, "sweep", "small", "--out-dir", two, "--threads", "1"], env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "over 2 rank(s)" in r.stderr and "[rank 1:" in r.stderr, r.stderr
        assert results(two) == first, (results(two), first)

        # A malformed runs.jsonl under two ranks: rank 0 refuses it and every rank leaves (rank 1
        # used to wait in MPI_Bcast for ever).
        broken = os.path.join(tmp, "broken")
        os.makedirs(broken)
        with open(os.path.join(broken, "runs.jsonl"), "w") as f:
            f.write('{"cell": {"N": 1}, "result": {}\nnot json\n')
        r = run(["mpirun", "-n", "2", BIN, "sweep", "small", "--out-dir", broken, "--threads", "1"], env=env, timeout=120)
        assert r.returncode != 0 and "invalid JSON" in r.stderr and "another rank failed" in r.stderr, r.stderr

        # Bad configs: a clear error, a non-zero exit, no summary.
        bad = os.path.join(tmp, "bad")
        for cfg, msg in [('{"N": [10], "heads": [2]}', 'unknown key "heads"'), ('{"N": "ten"}', "must hold integers"), ('{"d": [4, 8]}', '"d" takes one integer'), ('{"seeds": 0}', '"seeds" must hold integers from 1'),
                         ('{"task": "chars"}', "task must be")]:
            r = run([BIN, "sweep", cfg, "--out-dir", bad])
            assert r.returncode != 0 and msg in r.stderr, (cfg, r.stderr)
            assert not os.path.exists(os.path.join(bad, "summary.csv"))
        print("sweep CLI: single process, 2 MPI ranks, resume and bad configs all fine")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
