"""The job network and its egress allow-list (docs/operating/security.md).

rules     the allow-list grammar; imports nothing of dispatch (the job model uses it)
network   the internal bridge dispatch creates and owns
firewall  the INPUT rules that close the host to it, all but the proxy's port
proxy     the HTTP proxy on the gateway: CONNECT and absolute-URI, per-job credentials
relay     the bytes after the proxy said yes: a tunnel, or one re-framed HTTP request
guard     keeps the three in place, says what is missing, hands out the jobs' grants

Nothing is imported here, so that `dispatch.model` loading `rules` loads nothing else.
"""
