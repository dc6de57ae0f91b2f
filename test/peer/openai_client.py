#!/usr/bin/env python3
"""Peer check of lm-serve with the official `openai` Python client (issue 38; optional).

Starts lm-serve on a free loopback port with an API key, then through `openai.OpenAI(base_url=...)`
runs: models.list, a greedy completion (equal to lm-generate's text), a chat completion, the same
two streamed (the streamed text equal to the whole one, usage in the stream), embeddings (unit
vectors), two concurrent seeded completions equal to the same requests alone, and the client's own
error types for a bad field (BadRequestError, 400) and a wrong key (AuthenticationError, 401).
Prints JSON; exit 1 on a failed check, 77 when `openai` is absent.

usage: openai_client.py BIN_DIR [MODEL]
"""
import json
import math
import subprocess
import sys
import threading
from pathlib import Path

try:
    import openai
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

bindir = Path(sys.argv[1])
model = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parent.parent.parent / "data/models/kjv7m.h5")
srv = subprocess.Popen([bindir / "lm-serve", model, "--port", "0", "--api-key", "peer-key", "--slots", "4"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
checks = {}
try:
    url = json.loads(srv.stdout.readline())["listening"]
    client = openai.OpenAI(base_url=url + "/v1", api_key="peer-key")
    name = client.models.list().data[0].id
    checks["models_list"] = name == Path(model).name

    c = client.completions.create(model=name, prompt="In the beginning God", max_tokens=16, temperature=0)
    gen = subprocess.run([bindir / "lm-generate", model, "--prompt", "In the beginning God", "-n", "16", "--no-stream"],
                         check=True, capture_output=True, text=True).stdout
    # the completion keeps the first word's space (it continues the prompt); lm-generate prints none
    checks["completion_equals_lm_generate"] = c.choices[0].text.startswith(" ") and c.choices[0].text[1:] + "\n" == gen
    checks["completion_usage"] = c.usage.completion_tokens == 16 and c.usage.total_tokens == c.usage.prompt_tokens + 16

    msgs = [{"role": "user", "content": "Who made the heaven and the earth?"}]
    ch = client.chat.completions.create(model=name, messages=msgs, max_tokens=12, temperature=0)
    checks["chat"] = ch.choices[0].message.role == "assistant" and ch.usage.completion_tokens == 12

    parts = [p.choices[0].text for p in client.completions.create(model=name, prompt="In the beginning God", max_tokens=16,
                                                                    temperature=0, stream=True) if p.choices]
    checks["completion_stream_equals_whole"] = "".join(parts) == c.choices[0].text
    usage, text = None, ""
    for p in client.chat.completions.create(model=name, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
        if p.choices and p.choices[0].delta.content:
            text += p.choices[0].delta.content
        if p.usage:
            usage = p.usage
    checks["chat_stream_equals_whole"] = text == ch.choices[0].message.content and usage is not None and usage.completion_tokens == 12

    e = client.embeddings.create(model=name, input=["In the beginning", "And God said"])
    norms = [math.sqrt(sum(v * v for v in d.embedding)) for d in e.data]
    checks["embeddings"] = len(e.data) == 2 and all(abs(n - 1) < 1e-5 for n in norms)

    out = {}
    def seeded(seed):
        out[seed] = client.completions.create(model=name, prompt="And the earth", max_tokens=24, temperature=0.9, seed=seed).choices[0].text
    threads = [threading.Thread(target=seeded, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = dict(out)
    seeded(1)
    seeded(2)
    checks["concurrent_equal_alone"] = together == out

    try:
        client.completions.create(model=name, prompt="x", max_tokens=2, extra_body={"frobnicate": 1})
        checks["bad_field_400"] = False
    except openai.BadRequestError as err:
        checks["bad_field_400"] = err.status_code == 400 and "frobnicate" in str(err)
    try:
        openai.OpenAI(base_url=url + "/v1", api_key="wrong").models.list()
        checks["wrong_key_401"] = False
    except openai.AuthenticationError as err:
        checks["wrong_key_401"] = err.status_code == 401
finally:
    srv.terminate()
    rc = srv.wait(timeout=60)
checks["clean_exit_on_sigterm"] = rc == 0
print(json.dumps({"peer": "openai", "openai_version": openai.__version__, "checks": checks}))
sys.exit(0 if all(checks.values()) else 1)
