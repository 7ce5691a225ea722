"""The README's Quickstart, run verbatim: the first ```sh block under "## Quickstart", read from the
README itself, in a fresh folder whose build/ is this build's, with bash -euo pipefail. Every line
must succeed, within the two minutes the README promises, and the training must learn."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

README, BUILD = sys.argv[1], sys.argv[2]


def quickstart_block(text):
    section = text.split("\n## Quickstart\n", 1)
    assert len(section) == 2, "README has no '## Quickstart' section"
    body = section[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", body, re.S)
    assert blocks, "the Quickstart section has no ```sh block"
    return blocks[0]


def main():
    with open(README, encoding="utf-8") as f:
        block = quickstart_block(f.read())
    root = tempfile.mkdtemp(prefix="uatlab-quickstart-")
    try:
        os.symlink(os.path.abspath(BUILD), os.path.join(root, "build"))  # "from the repository root"
        # The block's own `cd "$(mktemp -d)"` lands in TMPDIR: keep that inside root too.
        tmp = os.path.join(root, "tmp")
        os.mkdir(tmp)
        env = dict(os.environ, TMPDIR=tmp, PATH="/usr/bin:/bin")
        start = time.monotonic()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, env=env, capture_output=True,
                           text=True, timeout=120)
        seconds = time.monotonic() - start
        assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
        assert seconds <= 120, seconds
        (work,) = os.listdir(tmp)  # the fresh folder the block made
        made = sorted(os.listdir(os.path.join(tmp, work)))
        for name in ["data.jsonl", "model.json", "enclosures.jsonl", "analysis.json", "net.safetensors",
                     "outputs.jsonl", "net.json", "trained.safetensors", "tiny.jsonl"]:
            assert name in made, (name, made)
        summary = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"accuracy"')]
        assert summary and summary[0]["train_accuracy"] == 1.0, summary
        assert "chance level" not in r.stderr, r.stderr[-2000:]
        print("quickstart: %d lines ran in %.1f s, made %s" % (block.count("\nuatlab "), seconds, ", ".join(made)))
    finally:
        shutil.rmtree(root)


main()
