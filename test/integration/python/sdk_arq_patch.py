"""openstacksdk's update_accelerator_request (python3-openstacksdk,
openstack/accelerator/v2): the bind or unbind it sends to one ARQ's own URL,
`PATCH /accelerator_requests/{uuid}` with the body `{uuid: [ops]}`, against
Berth's Cyborg API. Prints the ARQ as the SDK reads it afterwards, or the
error, as one JSON document.

usage: sdk_arq_patch.py CYBORG_URL TOKEN SERVICE_TOKEN ARQ_UUID bind HOST INSTANCE RP
       sdk_arq_patch.py CYBORG_URL TOKEN SERVICE_TOKEN ARQ_UUID unbind

TOKEN is sent as X-Auth-Token (keystoneauth's admin_token plugin); a
non-empty SERVICE_TOKEN as X-Service-Token (keystoneauth's
ServiceTokenAuthWrapper, as Nova sends its service user's token).
Over HTTPS, $OS_CACERT is the CA that verifies the server (as the CLI's
--os-cacert).
"""

import json
import os
import sys

import openstack
from keystoneauth1 import service_token, session, token_endpoint
from openstack import exceptions


def main():
    url, token, service, arq = sys.argv[1:5]
    action = sys.argv[5]
    auth = token_endpoint.Token(url, token)
    if service:
        auth = service_token.ServiceTokenAuthWrapper(
            user_auth=auth, service_auth=token_endpoint.Token(url, service))
    conn = openstack.connection.Connection(
        session=session.Session(auth=auth, verify=os.environ.get('OS_CACERT', True)),
        accelerator_endpoint_override=url)
    acc = conn.accelerator
    if action == 'bind':
        host, instance, rp = sys.argv[6:9]
        properties = [
            {'path': '/hostname', 'op': 'add', 'value': host},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
        ]
    else:
        properties = [{'path': '/' + f, 'op': 'remove'}
                      for f in ('hostname', 'instance_uuid', 'device_rp_uuid')]
    try:
        acc.update_accelerator_request(arq, properties)
        got = acc.get_accelerator_request(arq)
    except exceptions.HttpException as e:
        print(json.dumps({'error': e.status_code, 'message': str(e)}))
        return 1
    print(json.dumps({'uuid': got.uuid, 'state': got.state, 'instance_uuid': got.instance_uuid}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
