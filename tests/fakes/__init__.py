"""Test doubles shared by the test tiers (fake HTTP servers and the like)."""
