"""uatlab reproduce: every experiment runs in smoke mode and writes its table (Markdown + CSV) and plot."""
import os
import shutil
import subprocess
import sys
import tempfile

BIN, CORPUS = sys.argv[1], sys.argv[2]


def main():
    listing = subprocess.run([BIN, "reproduce", "--list"], capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    want = ["wang-e-1a", "wang-e-1b", "wang-e-2a", "wang-e-2b", "wang-e-3a", "wang-e-3b", "wang-e-4a", "wang-e-rates", "kajitsuka-memorization",
            "kajitsuka-delta", "memorization-capacity", "memorization-optimal", "fang-fit", "fang-regression", "yun-certified", "yun-mixers",
            "yun-mixers-data"]
    assert sorted(names) == sorted(want), names
    judged = ["wang-e-1a", "wang-e-1b", "wang-e-2a", "wang-e-2b", "wang-e-3a", "wang-e-3b", "wang-e-4a", "yun-mixers", "yun-mixers-data",
              "memorization-capacity", "memorization-optimal"]
    tmp = tempfile.mkdtemp(prefix="uatlab-reproduce-")
    try:
        for name in names:
            out = os.path.join(tmp, name)
            r = subprocess.run([BIN, "reproduce", name, "--mode", "smoke", "--corpus", CORPUS, "--out-dir", out],
                               capture_output=True, text=True)
            assert r.returncode == 0, (name, r.stderr[-2000:])
            assert "\n|" in "\n" + r.stdout, (name, r.stdout)
            for ext in [".md", ".csv", ".png"]:
                assert os.path.getsize(os.path.join(out, name + ext)) > 0, (name, ext)
            with open(os.path.join(out, name + ".png"), "rb") as f:
                assert f.read(4) == b"\x89PNG", name
            # Every experiment that judges claims does it through the statistics layer, and one seed
            # decides nothing: its verdicts say why they are inconclusive.
            if name in judged:
                assert "Computed verdicts (docs/statistics.md)" in r.stdout, (name, r.stdout[-2000:])
                assert "holds |" not in r.stdout and "contradicted |" not in r.stdout, (name, r.stdout[-2000:])
                assert "inconclusive (" in r.stdout, (name, r.stdout[-2000:])
            # A rerun trains nothing and writes the same table.
            again = subprocess.run([BIN, "reproduce", name, "--mode", "smoke", "--corpus", CORPUS, "--out-dir", out],
                                   capture_output=True, text=True)
            assert again.returncode == 0 and "->" not in again.stderr and again.stdout == r.stdout, (name, again.stderr)
        bad = subprocess.run([BIN, "reproduce", "wang-e-1a", "--mode", "smoke", "--corpus", os.path.join(tmp, "none.txt"),
                              "--out-dir", os.path.join(tmp, "bad")], capture_output=True, text=True)
        assert bad.returncode != 0 and "none.txt" in bad.stderr, bad.stderr
        assert not os.path.exists(os.path.join(tmp, "bad", "wang-e-1a.md"))
        print("reproduce: %d experiments in smoke mode, resumed, bad corpus refused" % len(names))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
