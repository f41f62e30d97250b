"""A Python client, generated from proto/ with grpcio-tools, driving Berth's
bind -> delete -> cleanup lifecycle: proof that the API works for SDKs users
generate, not only for Berth's own TypeScript one.

Usage: lifecycle.py GEN_DIR ENDPOINT HOST [TOKEN]
Prints one JSON object with what it observed; exits non-zero on any failure.
Every name and request id it creates carries a run id, and it deletes its
profile at the end: it can run again against the same scheduler.
"""
import json
import sys
import time
import uuid

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from berth.scheduler.v1 import accelerator_request_pb2 as arq_pb  # noqa: E402
from berth.scheduler.v1 import accelerator_request_pb2_grpc as arq_grpc  # noqa: E402
from berth.scheduler.v1 import device_pb2  # noqa: E402
from berth.scheduler.v1 import device_service_pb2 as dev_pb  # noqa: E402
from berth.scheduler.v1 import device_service_pb2_grpc as dev_grpc  # noqa: E402
from berth.scheduler.v1 import profile_pb2 as prof_pb  # noqa: E402
from berth.scheduler.v1 import profile_pb2_grpc as prof_grpc  # noqa: E402
from berth.agent.v1 import agent_pb2  # noqa: E402

endpoint, host = sys.argv[2], sys.argv[3]
token = sys.argv[4] if len(sys.argv) > 4 else ""
md = [("authorization", "Bearer " + token)] if token else []
run = uuid.uuid4().hex[:8]
profile_name = "py-nvme-block-" + run
instance = "py-vm-" + run

channel = grpc.insecure_channel(endpoint)
profiles = prof_grpc.ProfileServiceStub(channel)
arqs = arq_grpc.AcceleratorRequestServiceStub(channel)
devices = dev_grpc.DeviceServiceStub(channel)

profiles.CreateProfile(
    prof_pb.CreateProfileRequest(
        profile=prof_pb.Profile(
            name=profile_name,
            groups=[prof_pb.RequestGroup(vendor_id="144d", product_id="a824",
                                         required_traits=["HW_NVME_BES"],
                                         forbidden_traits=["HW_NVME_CES"], count=1)],
        )
    ),
    metadata=md, timeout=10,
)
created = arqs.CreateAcceleratorRequests(
    arq_pb.CreateAcceleratorRequestsRequest(profile_name=profile_name, request_id="py-" + run),
    metadata=md, timeout=10,
)
arq = created.accelerator_requests[0]
bound = arqs.BindAcceleratorRequests(
    arq_pb.BindAcceleratorRequestsRequest(
        bindings=[arq_pb.ArqBinding(arq_uuid=arq.uuid, instance_uuid=instance, host=host)]
    ),
    metadata=md, timeout=10,
).accelerator_requests[0]
assert bound.state == arq_pb.ARQ_STATE_BOUND, bound
assert bound.attach_handle_type == arq_pb.ATTACH_HANDLE_TYPE_PCI
handle = bound.attach_handle_info
ref = dev_pb.DeviceRef(uuid=bound.device_uuid)
dev = devices.GetDevice(dev_pb.GetDeviceRequest(device=ref), metadata=md, timeout=10).device
assert dev.device_state == device_pb2.DEVICE_STATE_ALLOCATED

# A NOT_FOUND is a proper status code with a message, never UNKNOWN.
try:
    devices.GetDevice(dev_pb.GetDeviceRequest(device=dev_pb.DeviceRef(uuid="00000000-0000-4000-8000-000000000000")),
                      metadata=md, timeout=10)
    not_found = None
except grpc.RpcError as e:
    not_found = e.code().name

arqs.DeleteAcceleratorRequests(arq_pb.DeleteAcceleratorRequestsRequest(instance_uuid=instance), metadata=md, timeout=10)
phases = []
for msg in devices.WatchCleanup(dev_pb.WatchCleanupRequest(device=ref), metadata=md, timeout=60):
    phases.append(agent_pb2.CleanupPhase.Name(msg.event.phase))

deadline = time.time() + 30
while True:
    dev = devices.GetDevice(dev_pb.GetDeviceRequest(device=ref), metadata=md, timeout=10).device
    if dev.device_state == device_pb2.DEVICE_STATE_AVAILABLE or time.time() > deadline:
        break
    time.sleep(0.2)

profiles.DeleteProfile(prof_pb.DeleteProfileRequest(name=profile_name), metadata=md, timeout=10)

print(json.dumps({
    "address": dev.address,
    "cleanup_action": dev.cleanup_action,
    "managed": handle.managed,
    "bus": handle.bus,
    "final_state": device_pb2.DeviceState.Name(dev.device_state),
    "reserved": dev.reserved,
    "phases": phases,
    "not_found": not_found,
    "proof_method": dev.last_cleanup.proof.method,
    "proof_bytes_total": dev.last_cleanup.proof.bytes_total,
}))
