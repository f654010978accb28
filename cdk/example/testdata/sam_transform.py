"""Print template.yaml after the AWS SAM transform, as JSON.

Usage: python3 sam_transform.py TEMPLATE > transformed.json

The translator refuses local CodeUri folders (it expects what `sam package`
uploaded), so each is replaced by a placeholder S3 URI first, as cfn-lint
does. No AWS call is made: every function has an explicit Role, so no managed
policy needs to be looked up.
"""
import json
import os
import sys

from samtranslator.parser.parser import Parser
from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse


class NoPolicies(ManagedPolicyLoader):
    def __init__(self):
        pass

    def load(self):
        return {}


def main():
    with open(sys.argv[1]) as f:
        tmpl = yaml_parse(f.read())
    for res in tmpl.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            res.setdefault("Properties", {})["CodeUri"] = "s3://placeholder/code.zip"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    out = Translator(managed_policy_map={}, sam_parser=Parser()).translate(
        sam_template=tmpl, parameter_values={}, passthrough_metadata=True
    )
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


main()
