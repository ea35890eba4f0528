"""Restore: put a checkpoint back from the nearest tier holding a verified copy (see ``service``).

- ``requests``    asking for a restore and cancelling one: the checks and catalog writes behind the API
- ``service``     claims this node's queued restores and runs them
- ``runner``      runs one claimed restore from the nearest verified tier into the target
- ``select``      which files a restore takes: those of some ranks, those matching globs
- ``paths``       where a restore may write, and the name each file gets there
- ``destination`` where each selected file goes: root, target and names
- ``source``      a tier seen from one checkpoint's directory
- ``sources``     where each file is read from: the tiers and peers, nearest first
- ``peers``       the holders of verified peer copies of the step's parts, as sources, nearest first
- ``copier``      the shared FileCopier, with a further source for a file whose bytes are bad
- ``fallback``    a tier's copy is bad: report it and mark the replica failed
- ``owners``      the owner, group and mode of what a restore writes
- ``progress``    bytes and files done, files placed, rate and time left
- ``cleanup``     removing what a cancelled or failed restore wrote
"""
