"""What the tests that serve a hub simulator share (tests/conftest.py's `hub` fixture serves REPO behind TOKEN)."""

REPO = "hubsim/tiny-llama"
TOKEN = "hf_test_token_0123456789"
