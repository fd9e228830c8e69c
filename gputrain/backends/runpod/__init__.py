"""RunPod backend: REST API v2 client (``api``), pod naming and bodies (``pods``), SSH/rsync to a pod
(``ssh``), the Docker build folder (``bundle``), ``up`` orchestration (``up``) and list/status/down/logs
(``manage``). Import the submodule you need; nothing here imports httpx at package import time."""
