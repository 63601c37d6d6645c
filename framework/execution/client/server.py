"""What the server says about itself, over plain blocking HTTP (requests): its info, its model, its counters.

Each query answers None when the server has no such route or does not answer; none of them is a
measurement, so none is worth failing a launch over. The Prometheus text is parsed by
framework.execution.prometheus (pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:  # the backend table imports the launcher; the client needs only its type
    from framework.execution.backends import BackendSettings


def served_model(base_url: str, headers: dict[str, str] | None) -> str | None:
    """The first model an OpenAI-compatible server lists at /v1/models (None if it lists none)."""
    try:
        resp = requests.get(base_url + "/v1/models", headers=headers, timeout=10)
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if resp.status_code == 200 and data else None
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def server_info(base_url: str, api_key: str | None, paths: tuple[str, ...] = ("/server_info", "/get_server_info")
                ) -> dict[str, Any] | None:
    """The server's description of itself from the first of the backend's info routes that answers JSON."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    for path in paths:
        try:
            resp = requests.get(base_url + path, timeout=5, headers=headers)
            if resp.status_code == 200:
                data = resp.json()
                return data if isinstance(data, dict) else {"response": data}
        except (requests.RequestException, ValueError):
            continue
    return None


def server_metrics(base_url: str, backend: BackendSettings) -> dict[str, float] | None:
    """The server's own Prometheus counters with its backend's prefix (None without a metrics route)."""
    from framework.execution import prometheus

    row = backend.table
    if not row.metrics_path or not row.metrics_prefix:
        return None
    headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else None
    try:
        resp = requests.get(base_url + row.metrics_path, timeout=5, headers=headers)
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    return prometheus.parse(resp.text, row.metrics_prefix) or None
