"""(v5) Images and files: the stack's bucket (``bucket``), conversations' attachments
(``store``), the workspace's uploads (``uploads``), URLs fetched once (``fetch``) and the
keyed names of end users' attachments (``owners``)."""
