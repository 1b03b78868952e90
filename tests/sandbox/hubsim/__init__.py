"""hubsim: a hub-compatible HTTP server serving a generated model repository (see server.py for the routes and the
huggingface_hub files they mirror, repo.py for the repository)."""

from .repo import Revision, generate, git_blob_id
from .server import Hub, HubServer, start

__all__ = ["Hub", "HubServer", "Revision", "generate", "git_blob_id", "start"]
