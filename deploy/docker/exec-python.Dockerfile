# An exec agent's image: the baton image plus Python, for exec agents
# written in Python (`command = ["python3", "agent.py"]`).
#
#   docker build -t baton:0.1.0 .
#   docker build -t baton-python:0.1.0 -f deploy/docker/exec-python.Dockerfile .
#
# Then give `baton manifests --image baton-python:0.1.0` (or set the image
# of the agent types that need it).

ARG BATON_IMAGE=baton:0.1.0
FROM ${BATON_IMAGE}
USER 0:0
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.* \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001
