"""The use cases: what the service does for its callers, each one object, none knowing HTTP.

``execute`` (authenticate, rate-limit, decide, sign, store), ``control_plane``
(organizations, API keys, policy publishing), ``usage``, ``replay``, ``export``
(audit bundles), ``consume`` (use a PERMIT once), ``approve`` and ``approval_sweep``
(human approval of an ESCALATE). They sit between the routes (``api``, ``web``) and
the core and stores; ``wiring.build_use_cases`` builds each once, for the app factory.
The pure core (``policy``, ``receipts``, ``ledger``, ``verify``, ``approvals``)
imports nothing from here.
"""
