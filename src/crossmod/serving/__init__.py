"""`crossmod serve`: exported culture adapters behind an HTTP API (LitServe). The memes a request may carry and
their checks, every culture's answer on as few forward passes as the exports allow, and the server around them:
dynamic batches, backpressure, limits, a bearer token, one log line per request, a draining shutdown.
"""
