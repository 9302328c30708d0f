package events

// amiAnnouncement is the event for the public ECS-optimized AMI update announcement (KindAMIAnnouncement).
// Amazon ECS publishes it to the topic arn:aws:sns:us-east-1:177427601217:ecs-optimized-amazon-ami-update when
// new ECS-optimized AMIs are released ("Amazon ECS Developer Guide: Subscribing to Amazon ECS-optimized AMI
// update notifications"). It is recognised by the ECSAmis member of the SNS Message; its content is not used:
// the agent resolves every tracked parameter, which is the authority on which AMI is current.
//
// Sample (testdata/sns-ecs-ami-update.json; Message unescaped and shortened):
//
//	{"Type": "Notification", "MessageId": "163ab552-da6f-596f-9437-e79a17ccfcd0",
//	 "TopicArn": "arn:aws:sns:us-east-1:177427601217:ecs-optimized-amazon-ami-update", "Subject": "None",
//	 "Message": {"ECSAgent": {"ReleaseVersion": "1.16.1"},
//	             "ECSAmis": [{"ReleaseVersion": "2017.09.e", "AgentVersion": "1.16.1", "OsType": "linux",
//	                          "Regions": {"us-east-1": {"Name": "amzn-ami-2017.09.e-amazon-ecs-optimized",
//	                                                    "ImageId": "ami-13401669"}, ...}}]},
//	 "Timestamp": "2018-01-05T00:48:35.408Z", ...}
func amiAnnouncement() Event {
	return Event{Kind: KindAMIAnnouncement, Envelope: EnvelopeSNS}
}
