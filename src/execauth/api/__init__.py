"""HTTP adapters: the Starlette app factory, routes, wire profiles and error mapping."""
