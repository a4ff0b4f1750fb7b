# Stand-in for python:3.11-slim: Debian's Python 3.11 in a virtual environment on PATH, so that
# `python` and `pip install` work as in the official image (Debian marks its own Python as
# externally managed). Differs from the official image: Debian's 3.11 patch release, not the latest.
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python
ENV PATH=/opt/python/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
CMD ["python3"]
