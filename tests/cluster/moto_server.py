"""moto's server (`moto_server`) with one test-only change, for the local cluster.

Usage (with the moto venv's python): python moto_server.py -H 127.0.0.1 -p PORT

Real SSM serves the public parameters under /aws/service/ (e.g. the EKS
optimized AMI ids) and refuses PutParameter on them; moto mimics the refusal
("No access to reserved parameter name") but has no EKS AMI parameters of its
own and no API to seed them. Karpenter resolves AMIs through exactly those
parameters, so this wrapper lets PutParameter write names under /aws/service/
(fixtures.py then writes the EKS / Bottlerocket ones with plain boto3). Every
other name, and every other API, behaves as in stock moto.

It also gives the instances CreateFleet launches the security groups of their
launch template, as EC2 does: moto's fleets read the groups from a "GroupSet"
key that launch templates never have (CreateLaunchTemplate stores
"SecurityGroupId"), so every instance landed in the VPC's default group and
nothing could tell which groups a node was launched into (drift by security
group compares exactly that). Each launch template version gets "GroupSet" set
to its security group ids; nothing else changes.

It also keeps the answer to each distinct request (its region and parameters)
of the three EC2 calls whose answers are moto's fixed data, which moto
otherwise serialises anew every time: DescribeInstanceTypes (5.8 s of CPU for
its 1,395 instance types), DescribeSpotPriceHistory (1-2 s for its 2,460
offerings, each at the same price and time) and DescribeInstanceTypeOfferings.
Every controller and provider a test starts asks each once; with five local
clusters on two cores, a burst of them kept a moto busy past the SDK's 120 s
timeout. The kept answer is the answer moto would give again; only the request
id repeats.

And it makes CreateFleet idempotent by its ClientToken, as EC2 is (moto
ignores the token and launches again): a request repeating a token with the
same parameters gets the first request's answer (the same fleet and instances,
even if they have been terminated since), and one repeating it with other
parameters gets EC2's IdempotentParameterMismatch error. That is what makes a
CreateFleet retried after a lost answer, or by a controller restarted in
between, launch nothing twice.
"""

import inspect
import sys

from moto.core.utils import utcnow
from moto.ec2.models import launch_templates as launch_template_models
from moto.ec2.responses import EC2Response
from moto.server import main as moto_main
from moto.ssm import models as ssm_models
from moto.ssm.exceptions import ParameterAlreadyExists

SEEDABLE_PREFIX = "/aws/service/"

_original_put_parameter = ssm_models.SimpleSystemManagerBackend.put_parameter
_signature = inspect.signature(_original_put_parameter)


def _put_parameter(self, *args, **kwargs):
    call = _signature.bind(self, *args, **kwargs)
    call.apply_defaults()
    a = call.arguments
    name = a["name"]
    if not name.startswith(SEEDABLE_PREFIX):
        return _original_put_parameter(self, *args, **kwargs)
    # Same bookkeeping as moto's put_parameter, minus the reserved-name check.
    versions = self._parameters[name]
    if versions and not a["overwrite"]:
        raise ParameterAlreadyExists
    previous = versions[-1] if versions else None
    param = ssm_models.Parameter(
        account_id=self.account_id,
        name=name,
        value=a["value"],
        parameter_type=a["parameter_type"]
        or (previous.parameter_type if previous else "String"),
        description=a["description"],
        allowed_pattern=None,
        keyid=None,
        last_modified_date=utcnow(),
        version=(previous.version + 1) if previous else 1,
        data_type=a["data_type"] or "text",
        tier=a["tier"] or self.default_parameter_tier,
    )
    versions.append(param)
    return param


ssm_models.SimpleSystemManagerBackend.put_parameter = _put_parameter

_original_version_init = launch_template_models.LaunchTemplateVersion.__init__


def _version_init(self, template, number, data, description):
    _original_version_init(self, template, number, data, description)
    groups = data.get("SecurityGroupIds") or data.get("SecurityGroupId")
    if isinstance(groups, str):
        groups = [groups]
    if groups and not data.get("GroupSet"):
        self.data = dict(data, GroupSet=list(groups))


launch_template_models.LaunchTemplateVersion.__init__ = _version_init

_original_call_action = EC2Response.call_action
FIXED_DATA_ACTIONS = frozenset(
    ["DescribeInstanceTypes", "DescribeSpotPriceHistory", "DescribeInstanceTypeOfferings"]
)
_fixed_answers = {}


_fleet_tokens = {}

IDEMPOTENT_MISMATCH = """<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>IdempotentParameterMismatch</Code><Message>The client token {token} was used before with other parameters</Message></Error></Errors><RequestID>idempotent-parameter-mismatch</RequestID></Response>"""


def _create_fleet(self):
    token = (self.querystring.get("ClientToken") or [None])[0]
    if not token:
        return _original_call_action(self)
    params = tuple(
        sorted((name, tuple(values)) for name, values in self.querystring.items() if name != "ClientToken")
    )
    key = (self.current_account, self.region, token)
    seen = _fleet_tokens.get(key)
    if seen is not None:
        seen_params, answer = seen
        if seen_params != params:
            return 400, {"Content-Type": "text/xml"}, IDEMPOTENT_MISMATCH.format(token=token)
        status, headers, body = answer
        return status, dict(headers), body
    status, headers, body = _original_call_action(self)
    if int(status) == 200:
        _fleet_tokens[key] = (params, (status, dict(headers), body))
    return status, headers, body


def _call_action(self):
    action = self._get_action()
    if action == "CreateFleet":
        return _create_fleet(self)
    if action not in FIXED_DATA_ACTIONS:
        return _original_call_action(self)
    key = (
        action,
        self.region,
        tuple(sorted((name, tuple(values)) for name, values in self.querystring.items())),
    )
    answer = _fixed_answers.get(key)
    if answer is None:
        status, headers, body = _original_call_action(self)
        if int(status) != 200:
            return status, headers, body
        answer = _fixed_answers[key] = (status, dict(headers), body)
    status, headers, body = answer
    return status, dict(headers), body


EC2Response.call_action = _call_action

if __name__ == "__main__":
    moto_main(sys.argv[1:])
