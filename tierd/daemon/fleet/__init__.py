"""Many daemons on one PostgreSQL catalog: heartbeats, the shared tiers' leader, the fleet's view.

- ``election`` the leader lease (database clock) fenced by a local monotonic deadline
- ``service``  ``FleetService``: heartbeats, elects, logs and audits each change of leader
- ``view``     what ``GET /v1/fleet`` shows: every node, who leads, what each is copying or left
"""
