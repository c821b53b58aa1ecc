"""execauth: an Execution Authorization Service with signed, offline-verifiable receipts."""

__version__ = "0.1.0"
