"""The web console at `/console`: admin-token login, server-rendered pages and SVG charts."""
