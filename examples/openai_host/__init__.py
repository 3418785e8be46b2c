"""A host on the official ``openai`` and ``anthropic`` SDKs, run by the ``agentturn.aio``
driver, against a local scripted OpenAI/Anthropic-compatible server.

Run the demo with ``python -m examples.openai_host`` (needs ``pip install -e '.[openai-host]'``).
See :mod:`.host` for the host's effects (and the glue the driver took over), :mod:`.engines`
for the SDK side, :mod:`.server` for the server and :mod:`.scenes` for what each run shows.
"""
