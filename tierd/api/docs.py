"""``/v1/docs``: Swagger UI, every file of it served by the daemon itself.

FastAPI's own page loads Swagger UI from a CDN, so on an air-gapped cluster it was blank. This
one takes the files from the ``swagger-ui-bundle-v2`` package (Swagger UI 5, which reads
OpenAPI 3.1) and serves the three the page uses at ``/v1/docs/<file>``. The page names them,
and the document, by relative URLs: it works behind a proxy that adds a path prefix, and it
asks no other host (no validator badge either: ``validatorUrl`` is off).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path

__all__ = ["DOCS_PATH", "DOCS_PATHS", "install_docs"]

DOCS_PATH = "/v1/docs"
#: What the page loads, by the name it is served under, with its media type.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
#: Every path this module serves: the page and its files (public: the gate lets them through).
DOCS_PATHS = frozenset({DOCS_PATH, *(f"{DOCS_PATH}/{name}" for name in ASSETS)})
#: A day: the files change only with the package, and each page load fetched 1.7 MB otherwise.
_CACHE = {"Cache-Control": "public, max-age=86400"}
_FILES = Path(str(swagger_ui_path))


def install_docs(app: FastAPI, title: str) -> None:
    """Serve Swagger UI for ``app``'s document at ``/v1/docs`` (set ``docs_url=None`` on the app)."""

    async def page() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="openapi.json",  # beside /v1/docs: /v1/openapi.json
            title=f"{title} API",
            swagger_js_url="docs/swagger-ui-bundle.js",
            swagger_css_url="docs/swagger-ui.css",
            swagger_favicon_url="docs/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    app.add_api_route(DOCS_PATH, page, include_in_schema=False)
    for name, media_type in ASSETS.items():
        app.add_api_route(f"{DOCS_PATH}/{name}", _asset(name, media_type), include_in_schema=False)


def _asset(name: str, media_type: str) -> Callable[[], Awaitable[FileResponse]]:
    path = _FILES / name

    async def serve() -> FileResponse:
        return FileResponse(path, media_type=media_type, headers=_CACHE)

    return serve
