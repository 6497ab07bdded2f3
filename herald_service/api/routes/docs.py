"""The API description pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), with their scripts and styles served by
this server.

FastAPI's own pages load Swagger UI and ReDoc from cdn.jsdelivr.net (and ReDoc's fonts from Google), so a browser
without internet access, the usual place of a moderation service, got a blank page. The files come from the PyPI
package ``fastapi-offline`` (MIT; Swagger UI 5, which reads the OpenAPI 3.1 that FastAPI writes, and ReDoc
standalone); the pages are FastAPI's own HTML (``fastapi.openapi.docs``) pointed at them. Each answers ``HEAD`` too.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from herald_service.api.routes.ops import PAGE_HEADERS

router = APIRouter(include_in_schema=False)

ASSETS = Path(str(files("fastapi_offline") / "static"))
"""The folder of ``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js`` and ``favicon.png``."""

ASSET_ROUTES = {
    "/docs/swagger-ui-bundle.js": "swagger-ui-bundle.js",
    "/docs/swagger-ui.css": "swagger-ui.css",
    "/docs/favicon.png": "favicon.png",
    "/redoc/redoc.standalone.js": "redoc.standalone.js",
}
"""Path on this server -> file in :data:`ASSETS`."""

ASSET_VERSION = version("fastapi-offline")
"""Put in the pages' asset URLs (``?v=``, which the asset routes ignore), so a browser holding a day-old copy fetches
the files of an upgraded package at once (re-tester)."""

ASSET_CACHE = {"Cache-Control": "public, max-age=86400"}
"""The files change only with the installed package; a day's caching spares a reload of 1.5 MB of script."""


def _root(request: Request) -> str:
    """The path prefix a reverse proxy serves this app under (``root_path``, as FastAPI's own pages use it)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _page(page: HTMLResponse) -> HTMLResponse:
    """The page with :data:`~.ops.PAGE_HEADERS` (no framing by other sites, no referrer, no type sniffing)."""
    page.headers.update(PAGE_HEADERS)
    return page


def _asset_url(request: Request, path: str) -> str:
    """``path`` (one of :data:`ASSET_ROUTES`) under the request's ``root_path``, with the package version."""
    return f"{_root(request)}{path}?v={ASSET_VERSION}"


@router.head("/docs", response_class=HTMLResponse)
@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json``, with its script and styles from this server."""
    return _page(get_swagger_ui_html(
        openapi_url=f"{_root(request)}/openapi.json", title="Herald - Swagger UI", oauth2_redirect_url=None,
        swagger_js_url=_asset_url(request, "/docs/swagger-ui-bundle.js"),
        swagger_css_url=_asset_url(request, "/docs/swagger-ui.css"),
        swagger_favicon_url=_asset_url(request, "/docs/favicon.png")))


@router.head("/redoc", response_class=HTMLResponse)
@router.get("/redoc", response_class=HTMLResponse)
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over ``/openapi.json``, with its script from this server and the browser's own fonts."""
    return _page(get_redoc_html(
        openapi_url=f"{_root(request)}/openapi.json", title="Herald - ReDoc", with_google_fonts=False,
        redoc_js_url=_asset_url(request, "/redoc/redoc.standalone.js"),
        redoc_favicon_url=_asset_url(request, "/docs/favicon.png")))


def _asset_route(path: str, name: str) -> None:
    async def asset(request: Request) -> Response:
        """The file, or 304 when the browser's copy is current (``If-None-Match``, the ETag Starlette gives a file
        from its size and modification time): the 1.5 MB script was sent again on every expired cache (re-tester)."""
        file = ASSETS / name
        answer = FileResponse(file, headers=ASSET_CACHE, stat_result=os.stat(file))
        held = {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}
        if answer.headers["etag"] in held or "*" in held:
            return Response(status_code=304, headers={"etag": answer.headers["etag"], **ASSET_CACHE})
        return answer

    asset.__name__ = f"asset_{name.replace('.', '_').replace('-', '_')}"
    router.add_api_route(path, asset, methods=["GET", "HEAD"], response_class=FileResponse)


for _path, _name in ASSET_ROUTES.items():
    _asset_route(_path, _name)
