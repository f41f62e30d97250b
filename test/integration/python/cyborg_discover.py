"""keystoneauth's version discovery against a Cyborg API root, as a client
given only the service's root URL does it: read the version document, follow
the v2 link it names, and list the ARQs there. Prints the endpoint the link
named and the number of ARQs, or the error, as one JSON document.

usage: cyborg_discover.py ROOT_URL TOKEN

$OS_CACERT is the CA that verifies the server (as the CLI's --os-cacert).
"""

import json
import os
import sys

from keystoneauth1 import discover, session, token_endpoint


def main():
    root, token = sys.argv[1:3]
    sess = session.Session(auth=token_endpoint.Token(root, token),
                           verify=os.environ.get('OS_CACERT', True))
    try:
        endpoint = discover.Discover(sess, root).url_for('2.0')
        arqs = sess.get(endpoint.rstrip('/') + '/accelerator_requests',
                        headers={'Accept': 'application/json'}).json()['arqs']
    except Exception as e:  # the JSON line says what failed, whatever it is
        print(json.dumps({'error': type(e).__name__, 'message': str(e)}))
        return 1
    print(json.dumps({'endpoint': endpoint, 'arqs': len(arqs)}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
