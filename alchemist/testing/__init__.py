"""Test helpers shipped with alchemist: the backend conformance suite and named fake
backends (:mod:`alchemist.testing.fakes`)."""
