"""Test helpers shared by unit and integration tests (fakes of remote services, plans)."""
