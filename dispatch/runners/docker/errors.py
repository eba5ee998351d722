"""What the Docker engine can say no with, as one small tree under `dispatch.errors.DockerError`.

    DockerError
    ├── DockerUnavailable    no engine answers: socket missing, refused, reset, or not the API
    │   └── DockerTimeout    the engine took longer than the call's timeout
    ├── ImageMissing         no such image on this host (404 on an image)
    ├── ContainerNotFound    no such container (404 on a container)
    ├── NetworkMissing       no such network (404 on a network)
    ├── ContainerConflict    name in use, or a state that forbids the call (409)
    │   └── ContainerNotRunning  the container is not running (a kill of one that exited)
    └── DockerApiError       any other non-2xx answer, with its status and message

The client raises only these: httpx errors and HTTP statuses are translated where they enter.
"""

from __future__ import annotations

from dispatch.errors import DockerError


class DockerUnavailable(DockerError):
    pass


class DockerTimeout(DockerUnavailable):
    pass


class ImageMissing(DockerError):
    pass


class ContainerNotFound(DockerError):
    pass


class NetworkMissing(DockerError):
    pass


class ContainerConflict(DockerError):
    pass


class ContainerNotRunning(ContainerConflict):
    pass


class DockerApiError(DockerError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"engine answered {status}: {message}")
        self.status = status
        self.message = message


__all__ = [
    "ContainerConflict",
    "ContainerNotFound",
    "ContainerNotRunning",
    "DockerApiError",
    "DockerError",
    "DockerTimeout",
    "DockerUnavailable",
    "ImageMissing",
    "NetworkMissing",
]
