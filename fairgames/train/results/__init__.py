"""What a finished run reports: its candidates scored and its solutions chosen
(:mod:`.solutions`, :mod:`.recommend`, the certified early stop :mod:`.early_stop`), the
constraints' intervals and verdict (:mod:`.intervals`, :mod:`.verdict`), and its outputs
(``results.json`` and its schema, ``report.md``, plots, group tables: :mod:`.report`,
:mod:`.outputs`, :mod:`.group_tables`)."""
