"""Nova's own Cyborg client (nova/accelerator/cyborg.py, python3-nova) as
Nova's conductor and compute drive it, one JSON command per stdin line, one
JSON answer per stdout line.

usage: nova_cyborg.py CYBORG_URL USER_TOKEN SERVICE_TOKEN

[cyborg] endpoint_override points at Berth; the user's token is the request
context's (Berth's Cyborg API in noauth reads it as user:project); with a
SERVICE_TOKEN, [service_user] send_service_user_token sends it as
X-Service-Token (keystoneauth's admin_token plugin), as a Nova configured for
service tokens does. Commands (the client's own methods):

  {"op": "request_groups", "profile": NAME}   -> get_device_profile_request_groups
  {"op": "create_arqs", "profile": NAME}      -> create_arqs
  {"op": "bind", "bindings": {ARQ: {...}}}    -> bind_arqs
  {"op": "arqs", "instance": UUID, "only_resolved": BOOL} -> get_arqs_for_instance
  {"op": "arq", "uuid": UUID}                 -> get_arq_by_uuid
  {"op": "pci", "instance": UUID}             -> get_arq_pci_device_profile of each ARQ
  {"op": "delete_instance", "instance": UUID} -> delete_arqs_for_instance
  {"op": "delete_arqs", "uuids": [UUID]}      -> delete_arqs_by_uuid
An exception answers {"error": CLASS, "message": TEXT}.
"""

import json
import sys

import nova.conf
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.accelerator import cyborg

CONF = nova.conf.CONF


def main():
    url, user_token, service_token = sys.argv[1], sys.argv[2], sys.argv[3]
    objects.register_all()
    CONF([], project='nova', default_config_files=[])
    CONF.set_override('endpoint_override', url, group='cyborg')
    if service_token:
        CONF.set_override('send_service_user_token', True, group='service_user')
        CONF.set_override('auth_type', 'admin_token', group='service_user')
        # admin_token's options (token, endpoint), as keystoneauth registers them when it loads the plugin.
        from keystoneauth1 import loading as ks_loading
        CONF.register_opts(
            ks_loading.get_auth_plugin_conf_options('admin_token'), group='service_user')
        CONF.set_override('token', service_token, group='service_user')
        CONF.set_override('endpoint', url, group='service_user')
    user, _, project = user_token.partition(':')
    ctx = nova_context.RequestContext(
        user_id=user, project_id=project or user, auth_token=user_token)
    client = cyborg.get_client(ctx)
    print(json.dumps({'ready': True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            out = run(ctx, client, cmd)
        except Exception as e:  # answered, not raised: the test judges it
            out = {'error': type(e).__name__, 'message': str(e)}
        print(json.dumps(out, default=str), flush=True)


def run(ctx, client, cmd):
    op = cmd['op']
    if op == 'request_groups':
        groups = cyborg.get_device_profile_request_groups(ctx, cmd['profile'])
        return {'groups': [{
            'requester_id': g.requester_id,
            'resources': dict(g.resources),
            'required_traits': sorted(g.required_traits),
            'forbidden_traits': sorted(g.forbidden_traits),
        } for g in groups]}
    if op == 'create_arqs':
        return {'arqs': client.create_arqs(cmd['profile'])}
    if op == 'bind':
        client.bind_arqs(cmd['bindings'])
        return {'ok': True}
    if op == 'arqs':
        return {'arqs': client.get_arqs_for_instance(
            cmd['instance'], only_resolved=cmd.get('only_resolved', False))}
    if op == 'arq':
        return {'arq': client.get_arq_by_uuid(cmd['uuid'])}
    if op == 'pci':
        arqs = client.get_arqs_for_instance(cmd['instance'], only_resolved=True)
        out = []
        for a in arqs:
            info = dict(a['attach_handle_info'])
            info.setdefault('physical_network', None)
            out.append(cyborg.get_arq_pci_device_profile(dict(a, attach_handle_info=info)))
        return {'pci': out}
    if op == 'delete_instance':
        client.delete_arqs_for_instance(cmd['instance'])
        return {'ok': True}
    if op == 'delete_arqs':
        client.delete_arqs_by_uuid(cmd['uuids'])
        return {'ok': True}
    raise exception.NovaException('unknown op %s' % op)


if __name__ == '__main__':
    main()
