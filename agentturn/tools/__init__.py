"""What a person runs, and nothing the library imports: the command line and what it shows.

* :mod:`~agentturn.tools.cli`: ``agentturn demo | check | explain | diagram | explore | fuzz``;
* :mod:`~agentturn.tools.demo` and :mod:`~agentturn.tools.demo_daemon`: the scripted scenes;
* :mod:`~agentturn.tools.render`: one readable line for any event or command (the demo, the
  notebooks and ``explain`` use it);
* :mod:`~agentturn.tools.check` and :mod:`~agentturn.tools.explain`: a recorded trace replayed
  against the spec, and told in plain words;
* :mod:`~agentturn.tools.explore`: the explorer and the fuzzer over the session.

The library (every module outside this package) never imports from here; a test checks it.
"""
