"""The program the runtime check runs inside the image, in the image's own interpreter.

Nothing of sparkflake imports these modules: ``probe_runner`` copies every ``.py`` file of
this directory but this one (``PROBE_MODULES``) into the sandbox, side by side, and runs
``probe.py`` with the image's Python, so the directory is that interpreter's
``sys.path[0]`` and the modules import one another by their file names. They use only the
standard library and the packages of the image.

- ``probe.py``: the one start — runtime imports, platform, versions, then the two parts;
- ``probe_capabilities.py``: what the image's code offers (backends, methods, formats, ...);
- ``probe_cases.py``: each launch case judged by vLLM's and SparkCache's own code;
- ``probe_meta_model.py``: the default launch's served models constructed on the meta device;
- ``probe_serving.py``: the parsers the cases name, NCCL's IB userspace, where each cache lands;
- ``probe_support.py``: error text, log capture, env-read tracking, forked children.
"""
