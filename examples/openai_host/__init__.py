"""An asyncio host on the official ``openai`` and ``anthropic`` SDKs, fed through
``agentturn.engines``, against a local scripted OpenAI/Anthropic-compatible server.

Run the demo with ``python -m examples.openai_host`` (needs ``pip install -e '.[openai-host]'``).
See :mod:`.host` for the host loop, :mod:`.engines` for the SDK side, :mod:`.server` for the
server and :mod:`.scenes` for what each run shows.
"""
