"""First end-to-end checks: the subprocess fixture and the in-process server both come up."""

from __future__ import annotations

import json

import httpx

from sentinel.sim import serve


def test_subprocess_sim_serves_generate(sim_factory):  # type: ignore[no-untyped-def]
    sim = sim_factory("--enable-metrics")
    r = httpx.post(
        sim.base_url + "/generate",
        json={"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 16}},
        timeout=10,
    )
    assert r.status_code == 200
    body = r.json()
    assert "4" in body["text"]
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 154820}
    state = sim.control("/state")
    assert state["status"] == "up"
    assert state["port"] == sim.port
    assert "The server is fired up and ready to roll!" in sim.stderr_text()


async def test_in_process_stream() -> None:
    async with serve(speed=200) as sim, httpx.AsyncClient(base_url=sim.base_url) as client:
        events = []
        async with client.stream(
            "POST",
            "/generate",
            json={"text": "hello", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}, "stream": True},
        ) as resp:
            async for line in resp.aiter_lines():
                if line:
                    events.append(line)
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5]
        assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
