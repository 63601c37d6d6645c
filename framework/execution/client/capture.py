"""Keeping what a request generated, for an `outputs` prediction: token ids where the API sends them, else text.

Only when the run asks (the workload's `keep_outputs`, which the run sets on the conditions an outputs
prediction compares), and bounded: at most the request's `output_tokens` ids, or that many text pieces of at
most `PIECE_CHARS` characters each (an event's text is one token's piece on a token-per-event stream).
Where each API gives ids:

- SGLang's native `/generate` stream: `output_ids` in each event (cumulative by default, the delta with
  `--stream-output`: cumulative when the list is as long as `meta_info.completion_tokens`); else `text`
  (cumulative);
- OpenAI completions and chat: a choice's `token_ids` (vLLM with `return_token_ids`), else the chunk's text
  (llama-cpp-python sends no ids): the text compared is the concatenation of the chunks' pieces.

The row keeps `{"prompt_sha256", "ids" | "text", "tokens", "truncated"}`; the prompt's digest is what the
analysis pairs on (framework.analysis.outputs). Pure.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

PIECE_CHARS = 64  # a text piece longer than this is cut (one token's piece is a few characters)


def prompt_digest(prompt: list[int] | str) -> str:
    """The prompt's identity: sha256 of its ids or text as JSON (what two conditions must both have sent)."""
    return hashlib.sha256(json.dumps(prompt, separators=(",", ":")).encode("utf-8")).hexdigest()


class OutputCapture:
    """One request's generated ids or text, as its stream's events show them, at most `limit` tokens."""

    def __init__(self, prompt: list[int] | str, limit: int) -> None:
        self.prompt_sha256 = prompt_digest(prompt)
        self.limit = max(1, int(limit))
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self.cumulative_text = ""
        self.truncated = False

    def _add_ids(self, ids: list[Any]) -> None:
        room = self.limit - len(self.ids)
        if len(ids) > room:
            self.truncated = True
        self.ids.extend(int(i) for i in ids[:max(0, room)])

    def _add_piece(self, text: str) -> None:
        if len(self.pieces) >= self.limit:
            self.truncated = True
            return
        if len(text) > PIECE_CHARS:
            self.truncated, text = True, text[:PIECE_CHARS]
        self.pieces.append(text)

    def take(self, endpoint: str, payload: Any) -> None:
        """Keep what one decoded event carries."""
        if not isinstance(payload, dict):
            return
        if endpoint == "generate":
            ids = payload.get("output_ids")
            if isinstance(ids, list):
                seen, count = len(self.ids), (payload.get("meta_info") or {}).get("completion_tokens")
                if isinstance(count, int) and not self.truncated:  # cumulative when it holds every token so far
                    cumulative = len(ids) == count and len(ids) >= seen
                else:
                    cumulative = len(ids) >= seen and ids[:seen] == self.ids
                self._add_ids(ids[seen:] if cumulative else ids)
            elif isinstance(payload.get("text"), str):
                text = payload["text"]
                self.cumulative_text = text[:self.limit * PIECE_CHARS]
                self.truncated |= len(text) > len(self.cumulative_text)
            return
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("token_ids"), list):
                self._add_ids(choice["token_ids"])
                continue
            text = (choice.get("delta") or {}).get("content") if endpoint == "chat" else choice.get("text")
            if isinstance(text, str) and text:
                self._add_piece(text)

    def record(self) -> dict[str, Any]:
        """What the request row keeps (`output`)."""
        out: dict[str, Any] = {"prompt_sha256": self.prompt_sha256}
        if self.ids:
            out.update(ids=self.ids, tokens=len(self.ids))
        else:
            text = self.cumulative_text or "".join(self.pieces)
            out.update(text=text, tokens=len(self.pieces) if self.pieces else None)
        out["truncated"] = self.truncated
        return out
