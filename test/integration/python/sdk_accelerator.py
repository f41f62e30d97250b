"""openstacksdk's accelerator proxy (python3-openstacksdk, openstack/accelerator/v2)
against Berth's Cyborg API: lists and creates a device profile and an ARQ,
prints what it read as one JSON document.

usage: sdk_accelerator.py CYBORG_URL TOKEN PROFILE_NAME RESOURCE_CLASS
"""

import json
import sys

import openstack


def main():
    url, token, name, rc = sys.argv[1:5]
    conn = openstack.connection.Connection(
        auth_type='admin_token', auth={'token': token, 'endpoint': url},
        accelerator_endpoint_override=url)
    acc = conn.accelerator
    created = acc.create_device_profile(
        name=name, groups=[{'resources:' + rc: '1'}], description='made by openstacksdk')
    arq = acc.create_accelerator_request(device_profile_name=name)
    print(json.dumps({
        'created_profile': {'uuid': created.uuid, 'name': created.name},
        'profile': acc.get_device_profile(created.uuid).groups,
        'profiles': sorted(p.name for p in acc.device_profiles()),
        'arq': {'uuid': arq.uuid, 'state': arq.state, 'profile': arq.device_profile_name},
        'arqs': [{'uuid': a.uuid, 'state': a.state} for a in acc.accelerator_requests()],
    }))


if __name__ == '__main__':
    main()
