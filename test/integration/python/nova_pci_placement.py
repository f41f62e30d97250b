"""Nova's own PCI-in-Placement view of a host, for Berth's tests to compare with.

Reads JSON on stdin: {"nodename": str, "device_spec": [entry, ...],
"devices": [{"address", "vendor_id", "product_id", "dev_type", "parent_addr"}]}
and runs Nova's code on it: nova.pci.devspec.PciDeviceSpec matches each device
to the first device_spec entry that matches it (as nova.pci.whitelist does),
and nova.compute.pci_placement_translator.PlacementView turns the matched
devices into resource providers. Prints {"standard_traits": [...],
"providers": {name: {"resource_class", "traits", "devices"}}} (os_traits'
list is what a Placement built with the same os-traits knows as standard).
"""
import json
import sys

import os_traits
from nova import objects
from nova.compute import pci_placement_translator as ppt
from nova.objects import fields, pci_device
from nova.pci import devspec

objects.register_all()

doc = json.load(sys.stdin)
specs = [devspec.PciDeviceSpec(entry) for entry in doc["device_spec"]]
view = ppt.PlacementView(doc["nodename"], instances_under_same_host_resize=[])
for d in doc["devices"]:
    dev = pci_device.PciDevice(
        address=d["address"],
        vendor_id=d["vendor_id"],
        product_id=d["product_id"],
        dev_type=d["dev_type"],
        parent_addr=d["parent_addr"],
        status=fields.PciDeviceStatus.AVAILABLE,
        instance_uuid=None,
    )
    spec = next((s for s in specs if s.match_pci_obj(dev)), None)
    view.process_dev(dev, spec)

out = {
    name: {
        "resource_class": rp.resource_class,
        "traits": sorted(rp.traits or []),
        "devices": sorted(dev.address for dev in rp.devs),
    }
    for name, rp in view.rps.items()
}
json.dump({"standard_traits": sorted(os_traits.get_traits()), "providers": out}, sys.stdout)
