"""The web dashboard (``leasequeue dashboard``, the ``leasequeue[dashboard]``
extra): server-rendered pages over the App's operator API. It reads a page
at a time, never scans the keyspace, and changes nothing without credentials.

``leasequeue.dashboard.server.create_app`` builds the ASGI app; this package
imports nothing itself, so that the CLI works without the extra installed."""
